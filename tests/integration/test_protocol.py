"""The chat protocol over a WebSocket: turns, observers, cancel, clear, regenerate, custom body."""

import asyncio
import json

import pytest
from django.test import AsyncClient

from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance, ChatMessage, Turn
from tests.agents import RESPONSES
from tests.support.frames import (
    RESP,
    chat_request,
    chunks,
    is_done,
    receive_until,
    text_of,
    user_message,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)


async def skip_connect_frames(communicator):
    assert (await communicator.receive_json_from())["type"] == "cf_agent_identity"
    assert (await communicator.receive_json_from())["type"] == "cf_agent_mcp_servers"


async def get_messages(user, path):
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(f"{path}/get-messages")
    assert response.status_code == 200
    return response.json()


async def wait_turn(request_id, *statuses, timeout=5.0):
    """The turn of ``request_id`` once it is in one of ``statuses``."""
    async def reached():
        turn = await Turn.objects.filter(request_id=request_id).afirst()
        return turn if turn is not None and turn.status in statuses else None

    return await eventually(reached, f"turn {request_id} in {statuses}", timeout=timeout)


async def test_connect_sends_identity_then_mcp(ws):
    a = await ws("/agents/demo-agent/room-1")
    assert await a.receive_json_from() == {"type": "cf_agent_identity", "name": "room-1", "agent": "demo-agent"}
    assert await a.receive_json_from() == {
        "mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []}, "type": "cf_agent_mcp_servers"
    }
    assert await a.receive_nothing(0.05)


async def test_get_messages_is_empty_then_ordered(ws, user):
    path = "/agents/demo-agent/history"
    a = await ws(path)  # opening it makes it; get-messages only reads (404 before)
    assert await get_messages(user, path) == []
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "one")]))
    await receive_until(a, is_done("r1"))
    history = await get_messages(user, path)
    await a.send_json_to(chat_request("r2", [*history, user_message("u2", "two")]))
    await receive_until(a, is_done("r2"))
    messages = await get_messages(user, path)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0]["id"] == "u1" and messages[2]["id"] == "u2"
    assert messages[3]["parts"][-1] == {
        "type": "text", "text": "(demo model, offline) You said: two", "state": "done"
    }


async def test_resume_request_without_stream_is_idle(ws):
    a = await ws()
    await skip_connect_frames(a)
    await a.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    assert await a.receive_json_from() == {
        "type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"
    }


async def test_sender_gets_no_transcript_during_its_own_turn(ws):
    a = await ws("/agents/demo-agent/own")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "hi")]))
    frames = await receive_until(a, is_done("r1"))
    assert all(f["type"] == RESP for f in frames)
    assert await a.receive_nothing(0.05)


async def test_disconnect_mid_turn_still_completes_and_persists(ws, user):
    path = "/agents/demo-agent/leaver"
    a = await ws(path)
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 20 10")]))
    await receive_until(a, lambda f: f.get("type") == RESP and "text-delta" in f.get("body", ""))
    await a.disconnect()
    await wait_turn("r1", Turn.Status.COMPLETED)
    messages = await get_messages(user, path)
    assert messages[-1]["parts"][-1]["text"] == "".join(f"w{i} " for i in range(20))


async def test_cancel_persists_partial_and_reports_aborted(ws, user):
    path = "/agents/demo-agent/cancel"
    a = await ws(path)
    b = await ws(path)
    await skip_connect_frames(a)
    await skip_connect_frames(b)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 300 10")]))
    before = await receive_until(a, lambda f: f.get("seq") == 6)
    await a.send_json_to({"type": "cf_agent_chat_request_cancel", "id": "r1"})
    after = await receive_until(a, is_done("r1"))
    assert after[-1] == {"body": "", "done": True, "id": "r1", "type": RESP, "outcome": "aborted",
                         "messageIds": ["u1"]}
    streamed = text_of(before + after)
    observed = await receive_until(b, is_done("r1"))
    # The observer gets the persisted partial before the terminal frame.
    assert observed[-2]["type"] == "cf_agent_chat_messages"
    partial = observed[-2]["messages"][-1]
    assert partial["parts"][-1] == {"type": "text", "text": streamed, "state": "streaming"}
    assert 0 < len(streamed) < len("".join(f"w{i} " for i in range(300)))
    assert (await get_messages(user, path))[-1] == partial
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.ABORTED


async def test_cancel_unknown_request_is_a_no_op(ws):
    a = await ws()
    await skip_connect_frames(a)
    await a.send_json_to({"type": "cf_agent_chat_request_cancel", "id": "nope"})
    assert await a.receive_nothing(0.1)


async def test_clear_deletes_history_and_tells_other_connections(ws, user):
    path = "/agents/demo-agent/clear"
    a = await ws(path)
    b = await ws(path)
    await skip_connect_frames(a)
    await skip_connect_frames(b)
    await a.send_json_to(chat_request("r1", [user_message("u1", "hi")]))
    await receive_until(a, is_done("r1"))
    await receive_until(b, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_chat_clear"})
    assert await b.receive_json_from() == {"type": "cf_agent_chat_clear"}
    assert await a.receive_nothing(0.1)
    assert await get_messages(user, path) == []


async def test_clear_aborts_the_running_turn_and_drops_its_partial(ws, user):
    path = "/agents/demo-agent/clear-running"
    a = await ws(path)
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 300 10")]))
    await receive_until(a, lambda f: f.get("seq") == 4)
    await a.send_json_to({"type": "cf_agent_chat_clear"})
    done = await receive_until(a, is_done("r1"))
    assert done[-1]["outcome"] == "aborted"
    assert await get_messages(user, path) == []


async def test_regenerate_replaces_the_last_reply(ws, user):
    path = "/agents/demo-agent/regen"
    a = await ws(path)
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "again")]))
    await receive_until(a, is_done("r1"))
    first = await get_messages(user, path)
    await a.send_json_to(chat_request("r2", [first[0]], trigger="regenerate-message"))
    frames = await receive_until(a, is_done("r2"))
    after = await get_messages(user, path)
    assert [m["role"] for m in after] == ["user", "assistant"]
    assert after[1]["id"] != first[1]["id"]
    assert after[1]["id"] == chunks(frames)[0]["messageId"]


async def test_client_pushed_messages_are_persisted_and_broadcast(ws, user):
    path = "/agents/demo-agent/push"
    a = await ws(path)
    b = await ws(path)
    await skip_connect_frames(a)
    await skip_connect_frames(b)
    pushed = [user_message("u1", "set by client"), {"id": "a1", "role": "assistant",
                                                    "parts": [{"type": "text", "text": "ok"}]}]
    await a.send_json_to({"type": "cf_agent_chat_messages", "messages": pushed})
    assert await b.receive_json_from() == {"messages": pushed, "type": "cf_agent_chat_messages"}
    assert await a.receive_nothing(0.05)
    assert await get_messages(user, path) == pushed


async def test_custom_body_and_request_id_reach_the_agent_as_plain_text(ws):
    a = await ws("/agents/body-echo-agent/b1")
    await skip_connect_frames(a)
    RESPONSES.pop("b1", None)
    request = chat_request("r1", [user_message("u1", "x")], clientTools=[], tenant="acme", flags=[1, 2])
    await a.send_json_to(request)
    frames = await receive_until(a, is_done("r1"))
    assert [c["type"] for c in chunks(frames)] == ["text-start", "text-delta", "text-end"]
    assert chunks(frames)[0]["id"] == "r1"
    assert json.loads(text_of(frames)) == {"body": {"tenant": "acme", "flags": [1, 2]}, "request_id": "r1"}
    # on_chat_response runs after the turn has ended (docs/architecture.md#response-hooks), so after the done frame.
    for _ in range(100):
        if RESPONSES.get("b1"):
            break
        await asyncio.sleep(0.01)
    [result] = RESPONSES["b1"]
    assert result.status == "completed" and result.request_id == "r1"


async def test_body_is_none_without_custom_fields(ws):
    a = await ws("/agents/body-echo-agent/b2")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "x")]))
    frames = await receive_until(a, is_done("r1"))
    assert json.loads(text_of(frames))["body"] is None


async def test_no_response(ws):
    a = await ws("/agents/silent-agent/s")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "x")]))
    assert await a.receive_json_from() == {
        "body": "No response was generated by the agent.", "done": True, "id": "r1", "type": RESP,
        "outcome": "completed", "messageIds": ["u1"],
    }


async def test_agent_exception_becomes_a_thrown_error_frame(ws):
    a = await ws("/agents/broken-agent/s")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "x")]))
    assert await a.receive_json_from() == {
        "body": "agent exploded", "done": True, "id": "r1", "type": RESP, "error": True
    }
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.ERROR


async def test_model_error_persists_partial_and_server_keeps_working(ws, user):
    path = "/agents/demo-agent/err"
    a = await ws(path)
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/fail")]))
    frames = await receive_until(a, is_done("r1"))
    assert frames[-2]["error"] is True and frames[-1]["outcome"] == "error"
    history = await get_messages(user, path)
    assert history[-1]["parts"][-1]["text"] == "This reply will fail "
    await a.send_json_to(chat_request("r2", [*history, user_message("u2", "still there?")]))
    assert text_of(await receive_until(a, is_done("r2"))).endswith("still there?")


async def test_submits_are_queued_in_order(ws, user):
    path = "/agents/demo-agent/queue"
    a = await ws(path)
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("q1", [user_message("v1", "/slow 10 10")]))
    await a.send_json_to(chat_request("q2", [user_message("v1", "/slow 10 10"), user_message("v2", "again")]))
    frames = await receive_until(a, is_done("q2"))
    order = [f["id"] for f in frames if f["type"] == RESP]
    first_q2 = order.index("q2")
    assert all(rid == "q1" for rid in order[:first_q2]) and "q1" not in order[first_q2:]
    history = await get_messages(user, path)
    assert [m["id"] for m in history[:2]] == ["v1", "v2"]
    assert [m["role"] for m in history] == ["user", "user", "assistant", "assistant"]


async def test_save_messages_from_python_streams_to_connections(ws, user):
    a = await ws("/agents/demo-agent/programmatic")
    await skip_connect_frames(a)
    agent = await DemoAgent.aget("programmatic", owner=user)
    result = await agent.save_messages(["from code"])
    assert result.status == "completed"
    transcript = await a.receive_json_from()
    assert transcript["type"] == "cf_agent_chat_messages"
    frames = await receive_until(a, is_done(result.request_id))
    assert text_of(frames) == "(demo model, offline) You said: from code"
    instance = await AgentInstance.objects.aget(slug="demo-agent", name="programmatic")
    assert await ChatMessage.objects.filter(instance=instance).acount() == 2


async def test_hand_written_chunks_stream_and_cancel(ws):
    a = await ws("/agents/chunk-agent/c")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "x")]))
    await receive_until(a, lambda f: f.get("seq") == 5)
    await a.send_json_to({"type": "cf_agent_chat_request_cancel", "id": "r1"})
    frames = await receive_until(a, is_done("r1"))
    assert frames[-1]["outcome"] == "aborted"


async def test_rpc_calls_get_a_clear_error(ws):
    a = await ws()
    await skip_connect_frames(a)
    await a.send_json_to({"type": "rpc", "id": "c1", "method": "getState", "args": []})
    assert await a.receive_json_from() == {
        "error": "Method getState does not exist", "id": "c1", "success": False, "type": "rpc"
    }


async def test_request_with_only_the_new_message_keeps_the_history(ws, user):
    path = "/agents/demo-agent/partial-send"
    a = await ws(path)
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "one")]))
    await receive_until(a, is_done("r1"))
    await a.send_json_to(chat_request("r2", [user_message("u2", "two")]))
    await receive_until(a, is_done("r2"))
    assert [m["role"] for m in await get_messages(user, path)] == ["user", "assistant", "user", "assistant"]
