"""Agents of the lifecycle tests (connection hooks, ``messages`` outside a turn); tests add them with ``served()``."""

from typing import Any

from agents_app import ChatResponseResult, Connection, ConnectionRequest, callable
from agents_app.demo.agents import DemoAgent

# What the hooks saw, per instance name, in order (tests read and clear it).
SEEN: dict[str, list[tuple[Any, ...]]] = {}


def roles(agent: DemoAgent) -> list[str]:
    return [m["role"] for m in agent.messages]


class GreeterAgent(DemoAgent):
    """Greets each connection with a frame of its own, refuses ``?refuse=<reason>``, records closes."""

    async def on_connect(self, connection: Connection, request: ConnectionRequest) -> None:
        SEEN.setdefault(self.name, []).append(("connect", connection.id, roles(self), request.query.get("refuse")))
        if "refuse" in request.query:
            await connection.close(4401, request.query["refuse"])
            return
        await connection.send(
            {
                "type": "greeting",
                "user": getattr(request.user, "username", None),
                "messages": len(self.messages),
                "origin": request.headers.get("origin"),
            }
        )

    async def on_close(self, connection: Connection, code: int, reason: str) -> None:
        SEEN.setdefault(self.name, []).append(("close", connection.id, code, reason))


class RaisingGreeterAgent(DemoAgent):
    """An ``on_connect`` that raises: logged, and the connection goes on."""

    def on_connect(self, connection: Connection, request: ConnectionRequest) -> None:
        raise RuntimeError("greeter is broken")


class TranscriptAgent(DemoAgent):
    """Records ``self.messages`` in the hooks that run outside a turn."""

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        SEEN.setdefault(self.name, []).append(("response", result.request_id, roles(self)))

    @callable
    def message_count(self) -> int:
        return len(self.messages)

    async def remember(self, payload: Any, ctx: Any) -> None:
        SEEN.setdefault(self.name, []).append(("scheduled", payload, roles(self)))


def served() -> Any:
    """These classes served for the length of a ``with`` block (``AGENT_CLASSES`` extended)."""
    from django.conf import settings
    from django.test import override_settings

    return override_settings(
        AGENT_CLASSES=[
            *settings.AGENT_CLASSES,
            *(f"{__name__}.{cls.__name__}" for cls in (GreeterAgent, RaisingGreeterAgent, TranscriptAgent)),
        ]
    )
