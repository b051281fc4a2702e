"""``protocol.codec``: orjson's speed, ``json.dumps``'s text (the module docstring's promise)."""

import datetime
import enum
import json
from dataclasses import dataclass
from typing import Any

import pytest

from agents_app.protocol import codec


def standard(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Colour(enum.StrEnum):
    RED = "red"


@pytest.mark.parametrize("value", [
    {"type": "text-delta", "id": "t1", "delta": "w1 "},
    {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "héllo ✓ \U0001f600 \"q\" \\ \n"}]}]},
    {"nested": [1, -2, 3.5, 0.1, 2**63 - 1, -(2**63), True, False, None, [], {}], "empty": ""},
    {"lone": "x\ud800y"},  # orjson refuses lone surrogates: json writes them
    {"big": 2**70, "small": -(2**70)},  # beyond 64 bits
    {1: "int key", "k": "v"},
    {"colour": Colour.RED, Colour.RED: 1},  # subclasses of str go through json as before
])
def test_dumps_writes_what_json_writes(value: Any) -> None:
    assert codec.dumps(value) == standard(value)


@pytest.mark.parametrize("value", [
    {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "héllo ✓ \U0001f600 \"q\""}]}]},
    {"big": 2**70, "n": [1.5, None, True]},  # beyond 64 bits: through json
])
def test_encoded_is_the_utf8_of_dumps(value: Any) -> None:
    assert codec.encoded(value) == codec.dumps(value).encode()


def test_encoded_refuses_a_lone_surrogate_as_utf8_does() -> None:
    with pytest.raises(UnicodeEncodeError):
        codec.encoded({"lone": "x\ud800y"})


@pytest.mark.parametrize("value", [datetime.datetime(2026, 12, 1), {"d": datetime.date(2026, 12, 1)}])
def test_dumps_refuses_what_json_refuses(value: Any) -> None:
    with pytest.raises(TypeError):
        standard(value)
    with pytest.raises(TypeError):
        codec.dumps(value)


def test_dumps_refuses_a_dataclass_as_json_does() -> None:
    @dataclass
    class Point:
        x: int

    with pytest.raises(TypeError):
        codec.dumps({"p": Point(1)})


def test_embedded_text_is_written_as_it_is() -> None:
    # A stored message's text as either database holds it: compact, or jsonb's spacing, ASCII escapes.
    texts = ['{"id":"u1","parts":[{"type":"text","text":"é"}]}', '{"id": "a1", "text": "\\u00e9 \\ud800"}']
    frame = {"messages": [codec.embedded(text) for text in texts], "type": "cf_agent_chat_messages"}
    assert codec.dumps(frame) == '{"messages":[' + ",".join(texts) + '],"type":"cf_agent_chat_messages"}'
    assert json.loads(codec.dumps(frame))["messages"] == [json.loads(text) for text in texts]
    assert codec.encoded(frame) == codec.dumps(frame).encode()
