"""pydantic-ai's run events as the AI SDK's UI message chunks, the dicts the wire carries.

``VercelAIEventStream`` makes a pydantic model of every chunk, which the turn then dumps to a
dict, and reaches a text delta through three nested async generators. Text deltas are most of
a reply's chunks, and that was the largest share of a streamed chunk's CPU (bench/README.md,
"Fourth round"). ``ChunkStream`` yields a plain text delta (one without provider metadata) as
the dict the dump gives, in the same key order, so its JSON is the same text; every other event
goes through the encoder as it is.
"""

from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.messages import PartDeltaEvent, TextPartDelta
from pydantic_ai.ui.vercel_ai import VercelAIEventStream

Chunk = dict[str, Any]


class ChunkStream(VercelAIEventStream[Any, Any]):
    """The AI SDK v6 encoder, with plain text deltas made as dicts (module docstring)."""

    def __init__(self) -> None:
        super().__init__(None, sdk_version=6)

    async def handle_event(self, event: Any) -> AsyncIterator[Any]:
        # Here rather than in ``handle_part_delta``: one async generator fewer per text delta.
        delta = event.delta if isinstance(event, PartDeltaEvent) else None
        if (isinstance(delta, TextPartDelta) and delta.content_delta
                and delta.provider_name is None and delta.provider_details is None):
            # ``TextDeltaChunk(id=..., delta=...).model_dump(by_alias=True, exclude_none=True)``
            yield {"type": "text-delta", "delta": delta.content_delta, "id": self.message_id}
            return
        async for chunk in super().handle_event(event):
            yield chunk

    async def chunks(self, events: AsyncIterator[Any]) -> AsyncIterator[Chunk]:
        """The chunks of ``events``, each a dict as ``model_dump(mode="json", by_alias=True, exclude_none=True)``."""
        async for chunk in self.transform_stream(events):
            yield chunk if isinstance(chunk, dict) else chunk.model_dump(mode="json", by_alias=True, exclude_none=True)
