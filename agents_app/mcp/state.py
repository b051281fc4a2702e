"""The MCP state of an instance, stored so every process reads one, and broadcast on change.

``cf_agent_mcp_servers`` carries ``{servers: {id: {name, server_url, auth_url, state, error,
instructions, capabilities}}, tools, prompts, resources}``, each tool, prompt and resource with its
``serverId`` (the reference's ``MCPServersState``). The server's id is its name, unique per
instance. One ``MCPServerStatus`` row per server holds what a process last learnt of it; a server
without one is ``not-connected`` (docs/architecture.md#mcp-servers).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models import MCPServerConfig, MCPServerStatus
from ..protocol import frames
from ..streaming import fanout
from .servers import MCPServer

State = MCPServerStatus.State


@dataclass(kw_only=True)
class Report:
    """What a process learnt of one server: its state, and what it offers once discovered."""

    state: str
    error: str = ""
    instructions: str | None = None
    capabilities: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    prompts: list[dict[str, Any]] | None = None
    resources: list[dict[str, Any]] | None = None

    def fields(self) -> dict[str, Any]:
        """The row's columns this report sets (discoveries only once made: a failure keeps them)."""
        values: dict[str, Any] = {"state": self.state, "error": self.error}
        if self.state == State.READY:
            values.update(instructions=self.instructions or "", capabilities=self.capabilities, tools=self.tools or [],
                          prompts=self.prompts or [], resources=self.resources or [])
        return values


def runtime_servers(instance_pk: int) -> list[MCPServer]:
    """The servers added to the instance at runtime, oldest first (one indexed read)."""
    return [server_of(row) for row in MCPServerConfig.objects.filter(instance_id=instance_pk)]


def any_runtime_servers() -> bool:
    """Whether any instance has a runtime server (start-up loads the MCP client then)."""
    return MCPServerConfig.objects.exists()


def server_of(row: MCPServerConfig) -> MCPServer:
    """The declaration a runtime row stands for."""
    return MCPServer(name=row.name, url=row.url, transport=row.transport, headers=row.headers,  # type: ignore[arg-type]
                     needs_approval=True if row.approve_all else frozenset(row.needs_approval),
                     tool_prefix=row.tool_prefix, runtime=True)


def record(instance_pk: int, server: MCPServer, report: Report, *, unless_ready: bool = False) -> bool:
    """Store what a process learnt of ``server``; False when nothing changed (nothing to broadcast).

    ``unless_ready``: a process opening its own connection does not set back a server that
    another process has ready (a ``connecting`` then would flicker on every client).
    """
    values = {"server_url": server.server_url, **report.fields()}
    row = MCPServerStatus.objects.filter(instance_id=instance_pk, name=server.name).first()
    if row is None:
        MCPServerStatus.objects.bulk_create(
            [MCPServerStatus(instance_id=instance_pk, name=server.name, **values)],
            update_conflicts=True, unique_fields=["instance", "name"], update_fields=list(values),
        )
        return True
    if unless_ready and row.state == State.READY:
        return False
    if all(getattr(row, name) == value for name, value in values.items()):
        return False
    MCPServerStatus.objects.filter(pk=row.pk).update(**values)
    return True


def forget(instance_pk: int, name: str) -> None:
    MCPServerStatus.objects.filter(instance_id=instance_pk, name=name).delete()


@dataclass
class Snapshot:
    """An instance's MCP state in the reference's shape; ``frame()`` is ``cf_agent_mcp_servers``."""

    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    tools: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"prompts": self.prompts, "resources": self.resources, "servers": self.servers, "tools": self.tools}

    def frame(self) -> frames.Frame:
        return frames.mcp_servers(self.as_json())


def snapshot(instance_pk: int | None, declared: Sequence[MCPServer]) -> Snapshot:
    """The state of the instance's servers: ``declared`` (its class's) then its runtime ones.

    Status rows of servers no longer declared nor added are left out. An unsaved instance has
    only its declared servers, not connected.
    """
    servers = [*declared, *(runtime_servers(instance_pk) if instance_pk is not None else [])]
    result = Snapshot()
    if not servers:
        return result  # every connect of an agent without MCP servers: one query, not two
    rows = {row.name: row for row in MCPServerStatus.objects.filter(instance_id=instance_pk)} if instance_pk else {}
    for server in servers:
        row = rows.get(server.name)
        result.servers[server.name] = {
            "auth_url": None,
            "capabilities": row.capabilities if row else None,
            "error": (row.error or None) if row else None,
            "instructions": (row.instructions or None) if row else None,
            "name": server.name,
            "server_url": server.server_url,
            "state": row.state if row else State.NOT_CONNECTED.value,
        }
        if row is not None:
            result.tools += [{**tool, "serverId": server.name} for tool in row.tools]
            result.prompts += [{**prompt, "serverId": server.name} for prompt in row.prompts]
            result.resources += [{**resource, "serverId": server.name} for resource in row.resources]
    return result


async def broadcast(instance_pk: int, current: Snapshot) -> None:
    """Send ``current`` to every connection of the instance, on every process (the fan-out group)."""
    await fanout.publish(instance_pk, current.frame())
