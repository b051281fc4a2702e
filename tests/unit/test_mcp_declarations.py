"""MCP server declarations: transports, validation, secrets by reference (agents_app/mcp/servers.py)."""

import pytest

from agents_app.mcp.serializers import header_reference
from agents_app.mcp.servers import (
    MCPConfigurationError,
    MCPServer,
    SecretRef,
    check_runtime_reference,
    env,
    setting,
    unique_names,
)


@pytest.mark.parametrize(("declaration", "kind", "server_url"), [
    ({"url": "https://mcp.example.com/mcp"}, "streamable-http", "https://mcp.example.com/mcp"),
    ({"url": "https://mcp.example.com/sse"}, "sse", "https://mcp.example.com/sse"),
    ({"url": "https://mcp.example.com/events", "transport": "sse"}, "sse", "https://mcp.example.com/events"),
    ({"command": "python", "args": ["server.py", "--quiet"]}, "stdio", "stdio:python server.py --quiet"),
])
def test_the_transport_and_address_of_a_declaration(declaration, kind, server_url):
    server = MCPServer(name="s", **declaration)
    assert (server.kind, server.server_url) == (kind, server_url)


@pytest.mark.parametrize(("declaration", "message"), [
    ({"name": "a b", "url": "https://x/mcp"}, "must be 1-100 letters"),
    ({"name": "s"}, "needs either a url or a command"),
    ({"name": "s", "url": "https://x/mcp", "command": "python"}, "needs either a url or a command"),
    ({"name": "s", "url": "ftp://x/mcp"}, "must start with http"),
    ({"name": "s", "url": "https://x/mcp", "transport": "stdio"}, "does not fit a url"),
    ({"name": "s", "url": "https://x/mcp", "headers": {"Authorization": "Bearer abc"}}, "never the secret"),
    ({"name": "s", "url": "https://x/mcp", "needs_approval": "deploy"}, "needs_approval is True, False"),
])
def test_bad_declarations_are_refused_with_the_reason(declaration, message):
    with pytest.raises(MCPConfigurationError, match=message):
        MCPServer(**declaration)


def test_secrets_are_read_when_resolved_and_a_missing_one_is_named(monkeypatch, settings):
    server = MCPServer(name="s", url="https://x/mcp", headers={
        "Authorization": env("MCP_TEST_TOKEN", prefix="Bearer "), "X-Key": "setting:MCP_TEST_KEY"})
    assert server.headers["X-Key"] == setting("MCP_TEST_KEY")
    with pytest.raises(MCPConfigurationError, match="The environment variable MCP_TEST_TOKEN is not set"):
        server.headers["Authorization"].resolve()
    monkeypatch.setenv("MCP_TEST_TOKEN", "t0k")
    settings.MCP_TEST_KEY = "k3y"
    assert {k: v.resolve() for k, v in server.headers.items()} == {"Authorization": "Bearer t0k", "X-Key": "k3y"}
    # What is stored and compared is the reference, never the value.
    assert server.to_json()["headers"]["Authorization"] == {"source": "env", "name": "MCP_TEST_TOKEN",
                                                            "prefix": "Bearer "}
    assert SecretRef.parse(server.to_json()["headers"]["Authorization"]) == server.headers["Authorization"]


def test_approval_prefix_and_fingerprint():
    server = MCPServer(name="gh", url="https://x/mcp", needs_approval=["create_issue"], tool_prefix="gh_")
    assert server.tool_name("create_issue") == "gh_create_issue"
    assert server.approval_for("create_issue") and not server.approval_for("list_issues")
    assert MCPServer(name="gh", url="https://x/mcp", needs_approval=True).approval_for("anything")
    assert server.fingerprint() == MCPServer(name="gh", url="https://x/mcp", needs_approval={"create_issue"},
                                             tool_prefix="gh_").fingerprint()
    assert server.fingerprint() != MCPServer(name="gh", url="https://y/mcp").fingerprint()
    with pytest.raises(MCPConfigurationError, match="Two MCP servers are named 'gh'"):
        unique_names([server, MCPServer(name="gh", command="python")])


@pytest.mark.parametrize(("text", "expected"), [
    ("env:T", SecretRef("env", "T")),
    ("Bearer env:T", SecretRef("env", "T", "Bearer ")),
    (" Token abc setting:K ", SecretRef("setting", "K", "Token abc ")),
])
def test_the_handle_reads_references_as_the_admin_and_api_document_them(text, expected):
    """One parser: the prefixed text the admin and the REST API take works for the handle too."""
    assert SecretRef.parse(text) == expected
    assert SecretRef.parse(header_reference(text)) == expected


@pytest.mark.parametrize("allowed", [["env:PUBLIC_TOKEN", "setting:B"], "env:PUBLIC_TOKEN, setting:B"])
def test_the_allow_list_names_whole_references_with_their_source(settings, allowed):
    """A runtime server's reference must be listed as it is, source and whole name: listing
    env:PUBLIC_TOKEN allows neither env:PUBLIC nor setting:PUBLIC_TOKEN (a string list works too)."""
    settings.AGENT_MCP_SECRET_NAMES = allowed
    check_runtime_reference(env("PUBLIC_TOKEN"))
    check_runtime_reference(setting("B"))
    for refused in (env("PUBLIC"), setting("PUBLIC_TOKEN"), env("B")):
        with pytest.raises(MCPConfigurationError, match="not in AGENT_MCP_SECRET_NAMES"):
            check_runtime_reference(refused)
