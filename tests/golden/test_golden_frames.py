"""Golden frames: whole turns as the client sees them, ids normalised (spec §2.10, cf-golden-frames §5).

To change the wire format, edit the fixture on purpose: ``UPDATE_GOLDEN=1 pytest tests/golden``
rewrites the fixtures from the current output, and the diff is reviewed like code.
"""

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.frames import chat_request, is_done, normalize, receive_until, user_message

pytestmark = pytest.mark.django_db(transaction=True)
FIXTURES = Path(__file__).parent / "frames"


def assert_golden(name: str, actual: Any) -> None:
    path = FIXTURES / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(json.dumps(actual, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(path.read_text())
    assert actual == expected


async def test_normal_turn_sender_and_observer(ws):
    """G1: the sender gets the stream and done; the observer also gets the transcript twice before
    the stream and the final transcript before done."""
    a = await ws("/agents/demo-agent/golden")
    b = await ws("/agents/demo-agent/golden")
    await a.send_json_to(chat_request("r1", [user_message("u1", "hi")]))
    got_a = await receive_until(a, is_done("r1"))
    got_b = await receive_until(b, is_done("r1"))
    ids: dict[str, str] = {}
    assert_golden("normal_turn", {"A": normalize(got_a, ids), "B": normalize(got_b, ids)})


async def test_tool_turn(ws):
    """A server tool call, its output, and the model's summary in one assistant message."""
    a = await ws("/agents/demo-agent/golden-tool")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool get_weather {"city": "Oslo"}')]))
    got = await receive_until(a, is_done("r1"))
    assert_golden("tool_turn", normalize(got))


async def test_in_band_error(ws):
    a = await ws("/agents/demo-agent/golden-error")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", "/fail")]))
    got = await receive_until(a, is_done("r1"))
    assert_golden("in_band_error", normalize(got))
