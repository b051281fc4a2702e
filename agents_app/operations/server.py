"""A server process's own start-up and shutdown work, around the hooks of ``lifecycle``.

Start-up warms what a first turn would otherwise pay for on the event loop, while other
connections stream: the agent classes imported and their models built once (their providers'
SDKs imported), the MCP client imported if any agent may use it, the database thread and its
connection open, the process's control channel on Redis; then it looks for turns a crash left
running (the process a deploy just stopped, say). Shutdown hands the turns still running here to
recovery at once, as a crash would be recovered but without waiting to be found
(docs/operations.md#lifespan), then closes the Redis pools and the database connection.
"""

import asyncio
import logging
from types import SimpleNamespace

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import connections

from .. import conf, llm, registry, turns
from ..agent import ChatAgent
from ..mcp import connections as mcp_connections
from ..mcp import state as mcp_state
from ..recovery import service as recovery
from ..turns import control
from . import health

logger = logging.getLogger("agents_app.operations")


async def warm() -> None:
    await database_sync_to_async(warm_models)()
    await database_sync_to_async(health.warm)()
    await control.channel_name()
    turns.sweep_on_startup()


def warm_models() -> None:
    """Import the agent classes and build each one's model once (``llm.warm``), and import the MCP
    client if an agent class declares servers or an instance has runtime ones (a process that has
    none never imports it: ``mcp._client``). A Celery worker does the same when it is ready, since
    it runs turns too (continuations, background turns). Reads the database."""
    llm.warm(cls.model for cls in registry.agent_classes().values())
    if not load_mcp_client_if_declared() and mcp_state.any_runtime_servers():
        mcp_connections.load_client()


def load_mcp_client_if_declared() -> bool:
    """Import the MCP client if an agent class declares servers; whether one does. No database
    read: the ASGI module calls it at import too, for Daphne, which sends no lifespan events."""
    declared = any(map(_declares_mcp_servers, registry.agent_classes().values()))
    if declared:
        mcp_connections.load_client()
    return declared


def _declares_mcp_servers(agent_class: type[ChatAgent]) -> bool:
    """Whether the class's ``get_mcp_servers()`` declares any, asked as the system check asks it
    (an instance that is not stored); one that cannot answer without its instance counts as yes."""
    try:
        return bool(agent_class(SimpleNamespace(name="(start-up)", pk=None)).get_mcp_servers())  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - its turns report it; here it only decides what to import
        return True


async def hand_off() -> int:
    """Let the turns running on this process end for up to ``AGENT_SHUTDOWN_GRACE_SECONDS``, then
    stop the rest and cut each into recovery; returns how many were cut.

    While they end, their clients (moved to other processes) follow them through Redis; a
    conversation's next queued turn goes to a worker (``turns.engine.drain``). The cut is the crash
    path's (``recovery.cut``): the partial reply stays in the stream buffer, every connection gets
    the terminal ``recovering`` frame, and a worker continues the reply. With
    ``AGENT_RECOVERY = "inline"`` the attempt waits in the queue for the next process's start-up
    sweep instead of running on this one, which is stopping.
    """
    running = control.tasks_here()
    if running:
        await asyncio.wait(running, timeout=float(conf.get("AGENT_SHUTDOWN_GRACE_SECONDS")))
    stopped = await control.stop_here()
    # Every cut in one thread hop (one at a time, the last of 26 turns waited a second for its cut:
    # bench/README.md, deploy.py), the announcements together, then every attempt sent to a
    # worker in one hop (not one hop, and one read of its instance, per cut).
    cuts = await database_sync_to_async(_cut_all)(stopped)
    await asyncio.gather(*(recovery.announce(won) for won in cuts))
    if cuts and conf.get("AGENT_RECOVERY") == "celery":
        await turns.run_recovery(*(won.turn.instance_id for won in cuts))
    if stopped:
        logger.info("Handed off %d running turn(s) to recovery", len(stopped))
    return len(stopped)


def _cut_all(turn_pks: list[int]) -> list[recovery.Cut]:
    """Cut each turn into recovery (``recovery.cut``, a transaction each); those another process
    cut first are left out."""
    return [won for pk in turn_pks if (won := recovery.cut(pk)) is not None]


async def close() -> None:
    """Close what the process holds open: its control channel, Redis pools, database connections."""
    await control.shutdown()
    layer = get_channel_layer()
    close_pools = getattr(layer, "close_pools", None)
    if close_pools is not None:
        await close_pools()
    await database_sync_to_async(connections.close_all)()
