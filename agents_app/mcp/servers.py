"""MCP server declarations: what an agent connects to, never the secrets themselves.

An ``MCPServer`` names a streamable-HTTP or SSE URL with its headers, or a stdio command with its
arguments. Header (and stdio environment) values are ``SecretRef`` references to an environment
variable or a Django setting, resolved when the connection opens: a runtime server's row, which
an admin can read, holds the reference only (docs/architecture.md#mcp-servers).

A runtime server (added by whoever holds ``manage_mcp_servers``) chooses its own URL, so it may
only reference the secrets listed in ``AGENT_MCP_SECRET_NAMES``, checked when it is added and
again when a connection resolves them; servers declared in code are trusted
(docs/architecture.md#runtime-server-secrets).
"""

import hashlib
import json
import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from django.conf import settings

from .. import conf
from ..errors import AgentConfigurationError

Transport = Literal["streamable-http", "sse", "stdio"]
SecretSource = Literal["env", "setting"]

# Server names: the id clients see (``servers: {<name>: …}``) and the unique key per instance.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# A reference as text, ``[prefix ]env:NAME`` / ``[prefix ]setting:NAME``: the reference is the last word.
REFERENCE_PATTERN = re.compile(r"^(?P<prefix>.*?\s)?(?P<source>env|setting):(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")
# Query parameters that carry credentials: a runtime server's URL is shown to every client.
CREDENTIAL_PARAMETER = re.compile(r"token|key|secret|passw|auth|signature|sig$|credential|session", re.IGNORECASE)


class MCPConfigurationError(AgentConfigurationError):
    """An MCP server declaration, or a reference it makes, is wrong (the server is marked failed)."""


@dataclass(frozen=True)
class SecretRef:
    """A value read when a connection opens: ``os.environ[name]`` or ``settings.<name>``, after ``prefix``.

    Written ``env("TOKEN", prefix="Bearer ")`` / ``setting("MCP_TOKEN")`` in code, or as the
    strings ``"env:TOKEN"`` / ``"setting:MCP_TOKEN"`` (no prefix) where only text fits.
    """

    source: SecretSource
    name: str
    prefix: str = ""

    def __post_init__(self) -> None:
        if self.source not in ("env", "setting") or not self.name:
            raise MCPConfigurationError(f"A secret reference needs a source 'env' or 'setting' and a name, "
                                        f"not {self.source!r}:{self.name!r}")

    @property
    def reference(self) -> str:
        """``env:NAME`` or ``setting:NAME``: how ``AGENT_MCP_SECRET_NAMES`` lists it."""
        return f"{self.source}:{self.name}"

    def resolve(self, *, runtime: bool = False) -> str:
        """The value now; ``MCPConfigurationError`` when the variable or setting is missing, or when
        a ``runtime`` server's reference is not in ``AGENT_MCP_SECRET_NAMES``."""
        if runtime:
            check_runtime_reference(self)
        value = os.environ.get(self.name) if self.source == "env" else getattr(settings, self.name, None)
        if value is None:
            where = "environment variable" if self.source == "env" else "setting"
            raise MCPConfigurationError(f"The {where} {self.name} is not set")
        return f"{self.prefix}{value}"

    def to_json(self) -> dict[str, str]:
        return {"source": self.source, "name": self.name, "prefix": self.prefix}

    @classmethod
    def parse(cls, value: "SecretRef | str | Mapping[str, str]") -> "SecretRef":
        """A reference from what code, a form or a stored row gives; a plain value is refused."""
        if isinstance(value, SecretRef):
            return value
        if isinstance(value, Mapping):
            return cls(value.get("source", ""), value.get("name", ""), value.get("prefix", ""))  # type: ignore[arg-type]
        found = REFERENCE_PATTERN.match(str(value).strip())
        if found is not None:
            return cls(found["source"], found["name"], found["prefix"] or "")  # type: ignore[arg-type]
        raise MCPConfigurationError(
            "MCP header and environment values are references, never the secret itself: "
            "write env('NAME', prefix=...) or setting('NAME'), or the strings 'env:NAME' / 'setting:NAME', "
            "optionally after a prefix ('Bearer env:NAME')")


def env(name: str, *, prefix: str = "") -> SecretRef:
    """A value from the environment variable ``name`` (``prefix`` first, e.g. ``"Bearer "``)."""
    return SecretRef("env", name, prefix)


def setting(name: str, *, prefix: str = "") -> SecretRef:
    """A value from the Django setting ``name`` (``prefix`` first)."""
    return SecretRef("setting", name, prefix)


def check_runtime_reference(reference: SecretRef) -> None:
    """Refuse a runtime server's reference unless ``AGENT_MCP_SECRET_NAMES`` lists it.

    Whoever adds a runtime server picks its URL: without the list, ``setting:SECRET_KEY`` would
    send the project's secret to any address.
    """
    allowed = conf.get("AGENT_MCP_SECRET_NAMES")
    names = allowed.split(",") if isinstance(allowed, str) else allowed  # a list, or "env:A,setting:B"
    if reference.reference not in {name.strip() for name in names}:
        raise MCPConfigurationError(
            f"{reference.reference} is not in AGENT_MCP_SECRET_NAMES: a server added at runtime may only read "
            "the environment variables and settings listed there")


def check_runtime_url(url: str) -> None:
    """Refuse credentials in a runtime server's URL (``user:pass@``, ``?token=``): every client sees it."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise MCPConfigurationError("An MCP server's URL may not hold a user or password (user:pass@): every "
                                    "client sees the URL; pass credentials in a header by reference")
    named = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True) if CREDENTIAL_PARAMETER.search(name)]
    if named:
        raise MCPConfigurationError(f"An MCP server's URL may not carry credentials in its query ({', '.join(named)}):"
                                    " every client sees the URL; pass them in a header by reference")


def _references(values: Mapping[str, Any] | None) -> dict[str, SecretRef]:
    return {str(key): SecretRef.parse(value) for key, value in (values or {}).items()}


@dataclass(frozen=True, kw_only=True)
class MCPServer:
    """One MCP server an agent instance uses.

    * ``url`` (streamable HTTP, or SSE when ``transport="sse"`` or the path ends in ``/sse``) with
      ``headers`` by reference; or ``command`` and ``args`` for a stdio server, with ``env`` by
      reference and ``cwd``. Stdio servers are declared in code only: a runtime server is a URL.
    * ``needs_approval``: ``True`` for every tool of the server, or the names of the tools that wait
      for the user's Approve / Reject (the server's names, before ``tool_prefix``).
    * ``tool_prefix``: put before each tool's name (``"gh_"``), to keep two servers' tools apart.
    * ``connect_timeout``: seconds to open the session and list what the server offers.
    """

    name: str
    url: str = ""
    transport: Transport | None = None
    headers: Mapping[str, SecretRef] = field(default_factory=dict)
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, SecretRef] = field(default_factory=dict)
    cwd: str | None = None
    needs_approval: bool | frozenset[str] = False
    tool_prefix: str = ""
    connect_timeout: float = 10.0
    # Added at runtime (a row), not declared in code: its references are limited (check_runtime).
    runtime: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not NAME_PATTERN.match(self.name):
            raise MCPConfigurationError(f"MCP server name {self.name!r} must be 1-100 letters, digits, '_', '.' "
                                        "or '-', starting with a letter or digit")
        if bool(self.url) == bool(self.command):
            raise MCPConfigurationError(f"MCP server {self.name!r} needs either a url or a command, not both")
        if self.url and not re.match(r"^https?://", self.url):
            raise MCPConfigurationError(f"MCP server {self.name!r}: the url must start with http:// or https://")
        if self.transport is not None and self.transport not in ("streamable-http", "sse", "stdio"):
            raise MCPConfigurationError(f"MCP server {self.name!r}: unknown transport {self.transport!r}")
        if (self.transport == "stdio") != bool(self.command) and self.transport is not None:
            raise MCPConfigurationError(f"MCP server {self.name!r}: transport {self.transport!r} does not fit "
                                        f"{'a command' if self.command else 'a url'}")
        object.__setattr__(self, "headers", _references(self.headers))
        object.__setattr__(self, "env", _references(self.env))
        object.__setattr__(self, "args", tuple(str(a) for a in self.args))
        approval = self.needs_approval
        if not isinstance(approval, bool):
            if isinstance(approval, str) or not isinstance(approval, Collection):
                raise MCPConfigurationError(f"MCP server {self.name!r}: needs_approval is True, False or tool names")
            object.__setattr__(self, "needs_approval", frozenset(str(n) for n in approval))

    def check_runtime(self) -> None:
        """What a server added at runtime must also pass: no credentials in its URL, and only the
        references ``AGENT_MCP_SECRET_NAMES`` lists (``MCPConfigurationError``)."""
        if self.kind == "stdio":
            raise MCPConfigurationError("Runtime MCP servers are URLs; declare stdio servers in get_mcp_servers()")
        check_runtime_url(self.url)
        for reference in self.headers.values():
            check_runtime_reference(reference)

    @property
    def kind(self) -> Transport:
        """The transport: stdio for a command, else the declared one or what the URL's path says."""
        if self.command:
            return "stdio"
        if self.transport is not None:
            return self.transport
        return "sse" if self.url.rstrip("/").endswith("/sse") else "streamable-http"

    @property
    def server_url(self) -> str:
        """What clients see as the server's address: the URL, or ``stdio:<command> <args>``."""
        return self.url or "stdio:" + " ".join([self.command, *self.args])

    def tool_name(self, name: str) -> str:
        """The name the model sees for the server's tool ``name``."""
        return f"{self.tool_prefix}{name}"

    def approval_for(self, name: str) -> bool:
        """Whether the server's tool ``name`` waits for the user's approval."""
        return self.needs_approval if isinstance(self.needs_approval, bool) else name in self.needs_approval

    def fingerprint(self) -> str:
        """A digest of the declaration: a connection made for another one is closed and made again."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """The declaration as JSON (references, never resolved values)."""
        approval = self.needs_approval if isinstance(self.needs_approval, bool) else sorted(self.needs_approval)
        return {
            "name": self.name, "url": self.url, "transport": self.kind, "command": self.command,
            "args": list(self.args), "cwd": self.cwd, "tool_prefix": self.tool_prefix,
            "headers": {k: v.to_json() for k, v in self.headers.items()},
            "env": {k: v.to_json() for k, v in self.env.items()},
            "needs_approval": approval, "connect_timeout": self.connect_timeout,
        }


def unique_names(servers: list[MCPServer]) -> list[MCPServer]:
    """``servers`` with their names checked unique (``get_mcp_servers()`` and runtime rows together)."""
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise MCPConfigurationError(f"Two MCP servers are named {server.name!r}")
        seen.add(server.name)
    return servers
