"""Agent classes used only by the tests (listed in thinkproject/settings_test.py)."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from agents_app import ChatAgent, ChatResponseResult

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
