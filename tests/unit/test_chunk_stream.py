"""``ChunkStream`` (``agents_app.llm.chunks``) gives the chunks pydantic-ai's own encoder gives,
dict for dict and in the same key order (the JSON text on the wire is the same)."""

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import PartDeltaEvent, PartEndEvent, PartStartEvent, TextPart, TextPartDelta
from pydantic_ai.ui.vercel_ai import VercelAIEventStream

from agents_app.llm.chunks import ChunkStream
from agents_app.llm.demo import build_demo_model


async def _replay(events: list[Any]) -> AsyncIterator[Any]:
    for event in events:
        yield event


async def _reference(events: list[Any]) -> list[str]:
    encoder: VercelAIEventStream[Any, Any] = VercelAIEventStream(None, sdk_version=6)
    return [json.dumps(chunk.model_dump(mode="json", by_alias=True, exclude_none=True))
            async for chunk in encoder.transform_stream(_replay(events))]


async def _ours(events: list[Any]) -> list[str]:
    return [json.dumps(chunk) async for chunk in ChunkStream().chunks(_replay(events))]


def _same_ids(texts: list[str]) -> list[str]:
    """The chunks with each random message id replaced by its order of first appearance."""
    ids: dict[str, str] = {}
    out = []
    for text in texts:
        chunk = json.loads(text)
        for key in ("id", "messageId"):
            if key in chunk:
                chunk[key] = ids.setdefault(chunk[key], f"id{len(ids)}")
        out.append(json.dumps(chunk))
    return out


TEXT_EVENTS = [
    PartStartEvent(index=0, part=TextPart(content="Hel")),
    PartDeltaEvent(index=0, delta=TextPartDelta(content_delta="lo")),
    PartDeltaEvent(index=0, delta=TextPartDelta(content_delta="")),
    PartDeltaEvent(index=0, delta=TextPartDelta(content_delta=" wörld", provider_name="openai")),
    PartDeltaEvent(index=0, delta=TextPartDelta(content_delta="!", provider_details={"k": 1})),
    PartDeltaEvent(index=0, delta=TextPartDelta(content_delta=' "quoted"\n')),
    PartEndEvent(index=0, part=TextPart(content='Hello wörld! "quoted"\n')),
    PartStartEvent(index=1, part=TextPart(content="Second")),
    PartDeltaEvent(index=1, delta=TextPartDelta(content_delta=" part")),
    PartEndEvent(index=1, part=TextPart(content="Second part")),
]


async def test_text_deltas_are_the_encoders_chunks() -> None:
    ours, reference = await _ours(TEXT_EVENTS), await _reference(TEXT_EVENTS)
    assert any('"text-delta"' in chunk for chunk in ours)
    assert _same_ids(ours) == _same_ids(reference)


@pytest.mark.parametrize("prompt", ["/burst 5", "get_weather city Oslo", "/tool getBrowserInfo"])
async def test_a_demo_run_gives_the_encoders_chunks(prompt: str) -> None:
    def get_weather(city: str) -> dict[str, str]:
        return {"city": city, "forecast": "rain"}

    agent = Agent(build_demo_model(), tools=[get_weather])
    async with agent.run_stream_events(prompt) as stream:
        events = [event async for event in stream]
    assert _same_ids(await _ours(events)) == _same_ids(await _reference(events))
