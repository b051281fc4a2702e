"""Golden frames: whole turns as the client sees them, ids normalised (docs/protocol.md#worked-sequences).

To change the wire format, edit the fixture on purpose: ``UPDATE_GOLDEN=1 pytest tests/golden``
rewrites the fixtures from the current output, and the diff is reviewed like code.
"""

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.frames import chat_request, follow_continuation, is_done, normalize, receive_until, user_message

pytestmark = pytest.mark.django_db(transaction=True)
FIXTURES = Path(__file__).parent / "frames"


def assert_golden(name: str, actual: Any) -> None:
    path = FIXTURES / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(json.dumps(actual, indent=1, ensure_ascii=False) + "\n")
    expected = json.loads(path.read_text())
    assert actual == expected


async def test_normal_turn_sender_and_observer(ws):
    """The text turn sequence (docs/protocol.md#text-turn-sequence): the sender gets the stream and
    done; the observer also gets the transcript twice before the stream and the final transcript
    before done."""
    a = await ws("/agents/demo-agent/golden")
    b = await ws("/agents/demo-agent/golden")
    # B's connect is over (identity, MCP servers) before A asks: a connection still connecting
    # when the turn starts is rightly told to resume its stream, which is another golden
    # (``test_reconnect_while_streaming``).
    connected_b = [await b.receive_json_from(timeout=10), await b.receive_json_from(timeout=10)]
    await a.send_json_to(chat_request("r1", [user_message("u1", "hi")]))
    got_a = await receive_until(a, is_done("r1"))
    got_b = connected_b + await receive_until(b, is_done("r1"))
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


async def test_reconnect_while_streaming(ws):
    """The reconnect sequence (docs/protocol.md#reconnect-sequence): resuming before identity, the probe
    answered again with its probeId, the ACK replays every stored chunk then ``replayComplete``, and
    live frames follow."""
    from tests.agents import GATE

    gate = GATE["resume"] = asyncio.Event()
    a = await ws("/agents/gate-agent/resume")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", "hi")]))
    await receive_until(a, lambda f: '"before "' in f.get("body", ""))
    b = await ws("/agents/gate-agent/resume")
    got = [await b.receive_json_from() for _ in range(3)]
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    got.append(await b.receive_json_from())
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r1"})
    got += await receive_until(b, lambda f: f.get("replayComplete") is True)
    gate.set()
    got += await receive_until(b, is_done("r1"))
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p2"})
    got.append(await b.receive_json_from())
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "gone"})
    got.append(await b.receive_json_from())
    assert_golden("reconnect_while_streaming", normalize(got))


async def test_client_tool_round_trip(ws):
    """The client tool sequence (docs/protocol.md#client-tool-sequence): the call ends the turn; the
    result updates the part and a continuation (server request id, ``continuation:true``, no
    messageId) appends to the same message."""
    a = await ws("/agents/demo-agent/golden-client-tool")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", "/tool getBrowserInfo")]))
    got = await receive_until(a, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "toolName": "getBrowserInfo",
                          "output": {"language": "fr"}, "autoContinue": True})
    got += await follow_continuation(a)
    assert_golden("client_tool_round_trip", normalize(_without_handshake(got)))


async def test_approval_round_trip(ws):
    """The approval sequence (docs/protocol.md#approval-sequence): ``tool-approval-request``, then the
    approval, then the tool's output and the model's text in the continuation."""
    a = await ws("/agents/demo-agent/golden-approval")
    await a.receive_json_from()
    await a.receive_json_from()
    text = '/tool send_email {"to": "bob@example.com", "subject": "hi"}'
    await a.send_json_to(chat_request("r1", [user_message("u1", text)]))
    got = await receive_until(a, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": True,
                          "autoContinue": True})
    got += await follow_continuation(a)
    assert_golden("approval_round_trip", normalize(_without_handshake(got)))


def _without_handshake(frames):
    """A continuation is followed through the resume handshake, and whether the probe is answered
    ``pending`` (continuation not started yet) or ``resuming`` (already streaming, so part of it is
    replayed) depends on timing. The golden keeps what the client ends up reading: every frame once,
    in order, with handshake frames and replay flags left out."""
    kept = []
    for frame in frames:
        if frame["type"] in ("cf_agent_stream_pending", "cf_agent_stream_resuming") or frame.get("replayComplete"):
            continue
        kept.append({k: v for k, v in frame.items() if k != "replay"})
    return kept



async def test_action_approval_round_trip(ws):
    """The approval sequence for an action (docs/protocol.md#approval-sequence): an approval-gated
    action's request carries its ``approvalDescriptor``, and the approved call runs in the
    continuation."""
    from tests.action_agents import SETUP, Setup

    SETUP["golden-action"] = Setup(permissions=["echo:run"], granted=["echo:run"], approval=True,
                                   approval_summary="Approve echo action", approval_risk="low")
    a = await ws("/agents/action-test-agent/golden-action")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool echo {"message": "hello"}')]))
    got = await receive_until(a, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": True,
                          "autoContinue": True})
    got += await follow_continuation(a)
    del SETUP["golden-action"]
    assert_golden("action_approval_round_trip", normalize(_without_handshake(got)))


async def test_durable_pause_parks_with_its_descriptor(ws):
    """The durable pause sequence (docs/protocol.md#durable-pause-sequence): the paused output, with
    the descriptor beside it, then the model's text."""
    a = await ws("/agents/demo-agent/golden-pause")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool deploy_release {"version": "1.4.2"}')]))
    got = normalize(await receive_until(a, is_done("r1")))
    # The execution id is a fresh uuid, also inside the model's text: named like the other ids.
    text = re.sub(r"actpause_[0-9a-f-]{36}", "actpause_<uuid>", json.dumps(got))
    assert_golden("durable_pause", json.loads(text))
