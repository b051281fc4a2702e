"""Property-based fuzzing of inbound frames (``hypothesis``): over ``protocol.parse``, and over a live consumer.

Frames are made up the way a careless or hostile client would: real frame types with fields of any
JSON type, messages with odd parts and extra keys, strings with lone surrogates and NUL, deep
nesting, and text that is not JSON at all. ``parse`` must return an event or raise
``ProtocolError``, and whatever it returns must be sendable (UTF-8) and storable. The consumer
must answer every frame without closing the socket or logging a traceback, and then run a
normal turn. 10,000 frames go through ``parse`` and 1,000 through the consumer on every run of
``make test``; ``make test-fast`` sends 1,000 through ``parse`` (``THINK_FUZZ_EXAMPLES``).
"""

import asyncio
import json
import logging
import os
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agents_app.protocol import frames
from agents_app.protocol.parse import MAX_DEPTH, ProtocolError, parse
from agents_app.protocol.types import MessageType
from tests.conftest import connect, engine_settled
from tests.support.frames import chat_request, is_done, receive_until, text_of, user_message

MAX_BYTES = 64 * 1024
# Frames through ``parse`` per run: one to two minutes on 2 cores at 10,000 (scripts/test.sh --fast sends fewer).
PARSE_EXAMPLES = int(os.environ.get("THINK_FUZZ_EXAMPLES", "10000"))

# Characters with the ones JSON can carry but UTF-8 and PostgreSQL cannot (lone surrogates, NUL).
characters = st.characters(categories=["Cs", "L", "Nd", "P", "Zs", "Cc"])
texts = st.text(characters, max_size=12) | st.sampled_from(["\ud800", "x\udfff", "\x00", "", "u1", "r1"])
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=12)

part_types = st.sampled_from(["text", "reasoning", "file", "step-start", "source-url", "tool-get_weather",
                              "dynamic-tool", "data-progress", "nonsense"]) | texts
tool_states = st.sampled_from(["input-streaming", "input-available", "output-available", "output-error",
                               "approval-requested", "approval-responded", "output-denied"]) | texts
def with_extra_keys(fields: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """``fields`` plus keys nobody declared (the AI SDK allows provider fields)."""
    return st.tuples(fields, st.dictionaries(texts, json_values, max_size=2)).map(lambda t: {**t[1], **t[0]})


parts = with_extra_keys(st.fixed_dictionaries(
    {"type": part_types},
    optional={"text": texts | json_values, "state": tool_states, "toolCallId": texts, "input": json_values,
              "output": json_values, "approval": json_values, "providerMetadata": json_values,
              "errorText": texts, "data": json_values, "url": texts, "mediaType": texts},
))
messages = st.fixed_dictionaries(
    {"id": texts | json_values, "role": st.sampled_from(["user", "assistant", "system"]) | texts,
     "parts": st.lists(parts, max_size=3) | json_values},
    optional={"metadata": json_values, "createdAt": texts},
)
bodies = st.fixed_dictionaries(
    {"messages": st.lists(messages, max_size=3) | json_values},
    optional={"trigger": st.sampled_from(["submit-message", "regenerate-message"]) | texts,
              "clientTools": json_values | st.lists(st.fixed_dictionaries({"name": texts}), max_size=2)},
)
inits = st.fixed_dictionaries({"method": st.sampled_from(["POST", "post", "GET"]) | texts,
                               "body": bodies.map(json.dumps) | texts | json_values})
frame_types = st.sampled_from([t.value for t in MessageType]) | texts
structured = st.fixed_dictionaries(
    {"type": frame_types},
    optional={"id": texts | json_values, "init": inits | json_values, "messages": st.lists(messages, max_size=3),
              "probeId": texts | json_values, "toolCallId": texts, "toolName": texts, "output": json_values,
              "approved": json_values, "autoContinue": json_values, "state": texts, "method": texts,
              "args": json_values, "clientTools": json_values},
)


def nested(depth: int) -> str:
    return '{"type": "cf_agent_state", "state": ' + "[" * depth + "]" * depth + "}"


raw_frames = st.one_of(
    structured.map(json.dumps),  # ensure_ascii: lone surrogates travel as \\ud800 escapes, as from a browser
    structured.map(lambda f: json.dumps(f, ensure_ascii=False).encode("utf-8", "replace").decode()),
    json_values.map(json.dumps),
    st.text(characters, max_size=40).map(lambda t: t.encode("utf-8", "replace").decode()),
    st.integers(MAX_DEPTH - 2, 3 * MAX_DEPTH).map(nested),
)


def sendable(value: Any) -> None:
    """What parse returns goes back out on a socket and into JSON columns: it must encode to UTF-8."""
    frames.encode({"value": value}).encode()


@settings(max_examples=PARSE_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw_frames)
def test_parse_returns_an_event_or_a_protocol_error(raw: str) -> None:
    try:
        event = parse(raw, max_bytes=MAX_BYTES, max_messages=100)
    except ProtocolError as exc:
        refusal = exc
    else:
        sendable(event.__dict__)
        return
    assert refusal.code and str(refusal)
    assert len(str(refusal)) < 300, "an error frame carries a short message, not a dump"
    sendable(str(refusal))


# ------------------------------------------------------------------------------- live consumer
class Tracebacks(logging.Handler):
    """Every record with an exception logged by agents_app while the frames are handled."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


FRAMES_PER_CONNECTION = 50


@pytest.mark.django_db(transaction=True)
@settings(max_examples=20, deadline=None, phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(raw_frames, min_size=FRAMES_PER_CONNECTION, max_size=FRAMES_PER_CONNECTION))
def test_a_live_consumer_answers_every_frame_and_then_a_normal_turn(make_user: Any, batch: list[str]) -> None:
    from django.contrib.auth import get_user_model
    from django.test import override_settings

    user = get_user_model().objects.filter(username="fuzz").first() or make_user("fuzz")
    handler = Tracebacks()
    logging.getLogger("agents_app").addHandler(handler)
    try:
        with override_settings(AGENT_FRAME_RATE={"per_second": 1e6, "burst": 10**6}):
            asyncio.run(_scenario(user, batch))
    finally:
        logging.getLogger("agents_app").removeHandler(handler)
    assert [r.getMessage() for r in handler.records] == []


async def _scenario(user: Any, batch: list[str]) -> None:
    a, connected, _ = await connect("/agents/demo-agent/fuzz", user)
    assert connected
    try:
        for raw in batch:
            await a.send_to(text_data=raw or " ")  # (the test client cannot send an empty text frame)
        # Then a normal turn, on a new request id, with the history as stored.
        await a.send_json_to({"type": "cf_agent_chat_clear"})
        final = f"fuzz-{uuid.uuid4().hex}"
        await a.send_json_to(chat_request(final, [user_message("fuzz-u", "after the fuzz")]))
        received = await receive_until(a, is_done(final), timeout=60)
        assert all(frame.get("type") != "websocket.close" for frame in received)
        assert text_of(received) == "(demo model, offline) You said: after the fuzz"
    finally:
        await a.disconnect()
        await engine_settled()
