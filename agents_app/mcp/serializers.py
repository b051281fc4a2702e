"""The REST API's shapes of an instance's MCP servers, and of a runtime server to add.

Header values are references, never secrets (docs/architecture.md#mcp-servers): ``env:NAME`` or
``setting:NAME``, optionally after a prefix (``Bearer env:GITHUB_TOKEN``). ``header_reference``
reads that text for the API and the admin's form alike, with ``SecretRef.parse`` as the handle does.
"""

from typing import Any

from rest_framework import serializers

from ..models import MCPServerConfig, MCPServerStatus
from .servers import NAME_PATTERN, MCPConfigurationError, SecretRef, check_runtime_reference, check_runtime_url

REFERENCE_HELP = (
    "A reference, never the secret: env:NAME (an environment variable) or setting:NAME (a Django setting), "
    "optionally after a prefix, e.g. 'Bearer env:GITHUB_TOKEN', and listed in AGENT_MCP_SECRET_NAMES. "
    "It is read when a process connects."
)


def header_reference(text: str) -> dict[str, str]:
    """``[prefix ]env:NAME`` as the stored reference ``{source, name, prefix}``; ValueError otherwise."""
    try:
        return SecretRef.parse(text).to_json()
    except MCPConfigurationError:
        raise ValueError(f"{text.strip()!r} is not a reference: {REFERENCE_HELP}") from None


def reference_text(reference: dict[str, str]) -> str:
    """A stored reference as ``header_reference`` reads it back."""
    return f"{reference.get('prefix', '')}{reference.get('source', '')}:{reference.get('name', '')}"


class MCPServerSerializer(serializers.Serializer[Any]):
    """One MCP server of an instance, declared in its class or added at runtime, as the service lists it."""

    id = serializers.CharField(help_text="The server's id: its name, unique in the instance.")
    name = serializers.CharField()
    server_url = serializers.CharField(help_text="Its URL (or stdio:<command> for a declared stdio server).")
    source = serializers.ChoiceField(choices=["declared", "runtime"],
                                     help_text="declared: in the agent's get_mcp_servers(); runtime: added since.")
    state = serializers.ChoiceField(choices=MCPServerStatus.State.values,
                                    help_text="The state a process last saw; not-connected until a turn connects.")
    error = serializers.CharField(allow_null=True, help_text="Why it failed, the last time it did.")
    tool_count = serializers.IntegerField()
    tools = serializers.ListField(child=serializers.CharField(), help_text="The names of the tools it offers.")


class AddMCPServerSerializer(serializers.Serializer[Any]):
    """The body of an add: a streamable-HTTP (or SSE) server for this instance's turns."""

    name = serializers.RegexField(NAME_PATTERN, max_length=100,
                                  help_text="Unique in the instance: letters, digits, '_', '.', '-'.")
    url = serializers.URLField(max_length=2000, help_text="http:// or https://; a path ending in /sse is SSE.")
    transport = serializers.ChoiceField(choices=MCPServerConfig.Transport.values, required=False,
                                        help_text="Leave it out to go by the URL.")
    headers = serializers.DictField(child=serializers.CharField(max_length=500), required=False,
                                    help_text=f"Header name to value. {REFERENCE_HELP}")
    approve_all = serializers.BooleanField(required=False, default=False,
                                           help_text="Every tool of the server waits for the user's Approve.")
    needs_approval = serializers.ListField(child=serializers.CharField(max_length=200), required=False,
                                           help_text="The tools that wait for the user's Approve (their own names).")
    tool_prefix = serializers.RegexField(r"^[A-Za-z0-9_]*$", max_length=50, required=False, allow_blank=True,
                                         help_text="Put before each tool's name, e.g. gh_.")

    def validate_url(self, value: str) -> str:
        try:
            check_runtime_url(value)
        except MCPConfigurationError as exc:
            raise serializers.ValidationError(str(exc)) from exc
        return value

    def validate_headers(self, value: dict[str, str]) -> dict[str, dict[str, str]]:
        try:
            headers = {name: header_reference(text) for name, text in value.items()}
            for reference in headers.values():
                check_runtime_reference(SecretRef.parse(reference))
        except (ValueError, MCPConfigurationError) as exc:
            raise serializers.ValidationError(str(exc)) from exc
        return headers
