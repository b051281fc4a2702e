"""What ``on_connect`` and ``on_close`` are given: a connection and the request that opened it.

Kept apart from ``connections`` (which runs the hooks and so needs the agent registry) so that
``ChatAgent`` can name these types without importing its own caller.
"""

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from ..protocol import frames

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
