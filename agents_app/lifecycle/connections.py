"""The connection hooks: ``ChatAgent.on_connect`` and ``on_close``, as the consumer calls them.

The consumer (``web.consumers``) hands each located connection to ``opened`` and its end to
``closed``; this module makes the agent object, fills its ``messages`` and guards the hooks, so
the consumer stays an adapter. A class that overrides neither hook costs no database read per
connection (docs/architecture.md#connection-hooks).
"""

import logging
from collections.abc import Mapping
from typing import Any

from .. import registry
from ..actions import call_maybe_async
from ..agent import ChatAgent
from ..errors import UnknownAgent
from ..models import AgentInstance
from .sockets import Connection, ConnectionRequest

logger = logging.getLogger("agents_app.connections")

def _overrides(instance: AgentInstance, hook: str) -> ChatAgent | None:
    """An agent object of the instance when its class overrides ``hook``, else None (also when the
    class is no longer served: a socket opened before a deploy that removed it closes after)."""
    try:
        agent = registry.agent_for(instance)
    except UnknownAgent:
        return None
    return agent if getattr(type(agent), hook) is not getattr(ChatAgent, hook) else None


async def opened(instance: AgentInstance, connection: Connection, scope: Mapping[str, Any]) -> bool:
    """Run ``on_connect`` for a new connection; False when the hook closed it (refused)."""
    agent = _overrides(instance, "on_connect")
    if agent is None:
        return True
    try:
        await agent.load_messages()
        await call_maybe_async(agent.on_connect, connection, ConnectionRequest.of(scope))
    except Exception:  # as the reference's onError: logged, and the connection goes on
        logger.exception("on_connect of %s raised", instance)
    return not connection.closed


async def closed(instance: AgentInstance, connection: Connection, code: int, reason: str) -> None:
    """Run ``on_close`` for a connection that ended (errors are logged)."""
    agent = _overrides(instance, "on_close")
    if agent is None:
        return
    try:
        await agent.load_messages()
        await call_maybe_async(agent.on_close, connection, code, reason)
    except Exception:
        logger.exception("on_close of %s raised", instance)
