"""The connection hooks: ``ChatAgent.on_connect`` and ``on_close``, as the consumer calls them.

The consumer (``web.consumers``) hands each located connection to ``opened`` and its end to
``closed``; this module makes the agent object, fills its ``messages`` and guards the hooks, so
the consumer stays an adapter. A class that overrides neither hook costs no database read per
connection (docs/architecture.md#connection-hooks).
"""

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from .. import registry
from ..actions import call_maybe_async
from ..agent import ChatAgent
from ..errors import UnknownAgent
from ..models import AgentInstance
from ..protocol import frames

logger = logging.getLogger("agents_app.connections")

# The close code a connection gets when ``on_connect`` closes it without naming one: the code our
# refused connections get (docs/protocol.md#close-codes), which the npm client does not retry
# (4000-4999 are terminal for it). Daphne sends only 1000 and 3000-4999, so 1008 is not one to use.
REFUSED = 4403


@dataclass(frozen=True)
class ConnectionRequest:
    """The HTTP request that opened a WebSocket (the reference's ``ctx.request``), read from its ASGI scope."""

    path: str
    # The query string's parameters; the last of a repeated one wins, as in Django's QueryDict.
    query: Mapping[str, str]
    # Header names in lower case; a repeated header's values joined by ", ".
    headers: Mapping[str, str]
    user: Any = None

    @classmethod
    def of(cls, scope: Mapping[str, Any]) -> "ConnectionRequest":
        headers: dict[str, str] = {}
        for name, value in scope.get("headers", []):
            key = name.decode("latin-1").lower()
            text = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True))
        return cls(path=scope.get("path", ""), query=query, headers=headers, user=scope.get("user"))


@dataclass
class Connection:
    """One WebSocket of an instance, as hooks see it (the reference's ``Connection``).

    ``id`` names it among the instance's connections (its channel name). ``send`` and ``close``
    reach this socket alone.
    """

    id: str
    user: Any
    _send: Callable[[str], Awaitable[None]] = field(repr=False)
    _close: Callable[[int, str], Awaitable[None]] = field(repr=False)
    # Set once ``close`` was called: the consumer sends nothing more of the conversation.
    closed: bool = False
    close_code: int | None = None
    close_reason: str = ""

    async def send(self, frame: Mapping[str, Any] | str) -> None:
        """Send ``frame`` (a dict, sent as JSON, or a text) to this socket."""
        if not self.closed:
            await self._send(frame if isinstance(frame, str) else frames.encode(dict(frame)))

    async def close(self, code: int = REFUSED, reason: str = "") -> None:
        """Close this socket with ``code`` and ``reason``; in ``on_connect``, this refuses it."""
        if not self.closed:
            self.closed, self.close_code, self.close_reason = True, code, reason
            await self._close(code, reason)


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
