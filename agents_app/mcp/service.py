"""The MCP servers of an instance: add and remove runtime ones, list all, read the state clients see.

One entry point per decision (docs/architecture.md#one-entry-point-per-decision): the handle
(``add_mcp_server``), the admin and the REST API all call these. A runtime server is a row
(``MCPServerConfig``, unique per instance and name: a second add of a name loses on the
constraint); its headers are references, checked here, resolved only when a process connects.
Every change is broadcast to every connection of the instance (``cf_agent_mcp_servers``).
"""

from collections.abc import Mapping
from typing import Any

from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction

from .. import registry
from ..errors import UnknownAgent
from ..models import AgentInstance, MCPServerConfig
from . import connections, state
from .servers import MCPConfigurationError, MCPServer, SecretRef


class MCPServerExists(MCPConfigurationError):
    """The instance already has a server by that name (declared in its class or added before)."""


def declared(instance: AgentInstance) -> list[MCPServer]:
    """The servers the instance's class declares (``get_mcp_servers()``); none if its class is gone."""
    try:
        agent = registry.agent_for(instance)
    except UnknownAgent:
        return []
    return list(agent.get_mcp_servers())


def add_server(instance: AgentInstance, name: str, url: str, *, headers: Mapping[str, Any] | None = None,
               transport: str | None = None, needs_approval: bool | list[str] = False, tool_prefix: str = "",
               created_by: Any = None) -> MCPServer:
    """Store a runtime server of ``instance``; turns on every process use it from their next start.

    Raises:
        MCPConfigurationError: a bad name, URL, transport or header (headers are references:
            ``env("NAME", prefix=...)``, ``setting("NAME")``, ``"[prefix ]env:NAME"``,
            ``"[prefix ]setting:NAME"``, listed in ``AGENT_MCP_SECRET_NAMES``); credentials in the URL.
        MCPServerExists: the name is taken on this instance.
    """
    server = MCPServer(name=name, url=url, transport=transport or None,  # type: ignore[arg-type]
                       headers={k: SecretRef.parse(v) for k, v in (headers or {}).items()},
                       needs_approval=needs_approval if isinstance(needs_approval, bool) else frozenset(needs_approval),
                       tool_prefix=tool_prefix, runtime=True)
    server.check_runtime()
    if instance.pk is None:
        instance = registry.materialize(instance)
    if any(d.name == name for d in declared(instance)):
        raise MCPServerExists(f"{instance} declares an MCP server named {name!r} in its class")
    try:
        with transaction.atomic():
            MCPServerConfig.objects.create(
                instance=instance, name=server.name, url=server.url, transport=server.kind,
                headers={k: v.to_json() for k, v in server.headers.items()},
                approve_all=server.needs_approval is True,
                needs_approval=[] if isinstance(server.needs_approval, bool) else sorted(server.needs_approval),
                tool_prefix=server.tool_prefix, created_by=created_by,
            )
    except IntegrityError:
        raise MCPServerExists(f"{instance} already has an MCP server named {name!r}") from None
    return server


def remove_server(instance: AgentInstance, name: str) -> bool:
    """Remove a runtime server and its state; False when the instance has none by that name.

    Processes close their connection to it at the next turn of the instance.
    """
    if instance.pk is None:
        return False
    deleted, _ = MCPServerConfig.objects.filter(instance=instance, name=name).delete()
    if deleted:
        state.forget(instance.pk, name)
    return bool(deleted)


def snapshot(instance: AgentInstance) -> state.Snapshot:
    """What ``cf_agent_mcp_servers`` carries for ``instance`` now."""
    return state.snapshot(instance.pk, declared(instance))


def list_servers(instance: AgentInstance) -> list[dict[str, Any]]:
    """Each server with its state: ``{id, name, server_url, state, error, declared, tools, ...}``."""
    current = snapshot(instance)
    declared_names = {s.name for s in declared(instance)}
    return [{"id": name, **entry, "declared": name in declared_names,
             "tools": [t for t in current.tools if t["serverId"] == name]}
            for name, entry in current.servers.items()]


async def broadcast(instance: AgentInstance) -> state.Snapshot:
    """Send the instance's current state to every connection of it, on every process."""
    current = await database_sync_to_async(snapshot)(instance)
    if instance.pk is not None:
        await state.broadcast(instance.pk, current)
    return current


async def aadd_server(instance: AgentInstance, name: str, url: str, *, connect: bool = True,
                      **options: Any) -> dict[str, Any]:
    """``add_server``, then a first connection from this process (``connect``): its state, tools,
    prompts and resources are stored and every client sees them. Returns ``{id, state, error}``."""
    instance = await registry.amaterialize(instance)
    server = await database_sync_to_async(add_server)(instance, name, url, **options)
    await broadcast(instance)
    if connect:
        await connections.probe(instance.pk, server, declared=await database_sync_to_async(declared)(instance))
    entry = (await database_sync_to_async(snapshot)(instance)).servers[server.name]
    return {"id": server.name, "state": entry["state"], "error": entry["error"]}


async def aremove_server(instance: AgentInstance, name: str) -> bool:
    """``remove_server``, then the new state to every client."""
    removed = await database_sync_to_async(remove_server)(instance, name)
    if removed:
        await broadcast(instance)
    return removed
