"""Agent classes used only by the tests (listed in thinkproject/settings_test.py)."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import RunContext

from agents_app import ChatAgent, ChatResponseResult, TurnState

# Results seen by on_chat_response, per instance name (tests read and clear it).
RESPONSES: dict[str, list[ChatResponseResult]] = {}


class BodyEchoAgent(ChatAgent):
    """Replies in plain text with the custom body and request id it was given."""

    async def on_chat_message(self) -> str:
        return json.dumps({"body": self.body, "request_id": self.request_id})

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        RESPONSES.setdefault(self.name, []).append(result)


class SilentAgent(ChatAgent):
    """Returns no response at all."""

    async def on_chat_message(self) -> None:
        return None


class BrokenAgent(ChatAgent):
    """Raises before producing anything."""

    async def on_chat_message(self) -> str:
        raise RuntimeError("agent exploded")


class ChunkAgent(ChatAgent):
    """Streams UI chunks written by hand, slowly, honouring the abort signal."""

    async def on_chat_message(self) -> AsyncIterator[dict[str, Any]]:
        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "start"}
            yield {"type": "text-start", "id": "t1"}
            for i in range(50):
                await asyncio.sleep(0.01)
                yield {"type": "text-delta", "id": "t1", "delta": f"c{i} "}
            yield {"type": "text-end", "id": "t1"}
            yield {"type": "finish", "finishReason": "stop"}

        return chunks()


class SharedRoomAgent(ChatAgent):
    """Any logged-in user may open any instance."""

    shared = True


def explode(why: str) -> str:
    """A tool that always fails."""
    raise RuntimeError(f"exploded: {why}")


async def report(ctx: "RunContext[TurnState[ToolAgent]]") -> str:
    """Writes data parts: one updated in place, one appended, one transient."""
    await ctx.deps.write({"type": "data-status", "id": "s1", "data": {"step": 1}})
    await ctx.deps.write({"type": "data-status", "id": "s1", "data": {"step": 2}})
    await ctx.deps.write({"type": "data-note", "data": {"text": "appended"}})
    await ctx.deps.write({"type": "data-ping", "data": {"at": 1}, "transient": True})
    return "reported"


class ToolAgent(ChatAgent):
    """Tools for the tool tests."""

    def get_tools(self) -> list[Any]:
        return [explode, report]


# Released by the test: GateAgent streams "before ", waits for it, then "after".
GATE: dict[str, asyncio.Event] = {}


class GateAgent(ChatAgent):
    """A reply that pauses mid-stream until the test opens the gate (deterministic resume tests)."""

    async def on_chat_message(self) -> AsyncIterator[dict[str, Any]]:
        gate = GATE.setdefault(self.name, asyncio.Event())

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "start"}
            yield {"type": "start-step"}
            yield {"type": "text-start", "id": "t1"}
            yield {"type": "text-delta", "id": "t1", "delta": "before "}
            await gate.wait()
            yield {"type": "text-delta", "id": "t1", "delta": "after"}
            yield {"type": "text-end", "id": "t1"}
            yield {"type": "finish-step"}
            yield {"type": "finish", "finishReason": "stop"}

        return chunks()


class TailAgent(ChatAgent):
    """Streams its whole reply at once, then waits before the turn ends: its last chunks and its
    terminal frame travel in different fan-out batches (lost-tail tests)."""

    async def on_chat_message(self) -> AsyncIterator[dict[str, Any]]:
        async def chunks() -> AsyncIterator[dict[str, Any]]:
            yield {"type": "start"}
            yield {"type": "text-start", "id": "t1"}
            for i in range(5):
                yield {"type": "text-delta", "id": "t1", "delta": f"w{i} "}
            yield {"type": "text-end", "id": "t1"}
            yield {"type": "finish", "finishReason": "stop"}
            await asyncio.sleep(0.2)

        return chunks()
