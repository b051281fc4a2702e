"""Issue 17's hostile frames, each over a WebSocket: a clear error frame or a clean effect, the socket
stays open, the conversation goes on, and nothing reaches the client as a pydantic dump.

(The same frames against a live server on PostgreSQL: ``tests/crossprocess/test_hostile_live.py``.)
"""

import json

import pytest
from django.test import override_settings

from agents_app.models import ChatMessage, Turn
from agents_app.protocol.parse import MAX_DEPTH, REPLACEMENT
from tests.support.frames import RESP, chat_request, is_done, open_agent, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/agents/demo-agent/hostile"


async def answer_of(a, raw: str) -> dict:
    await a.send_to(text_data=raw)
    return await a.receive_json_from()


async def turn(a, request_id: str, messages: list[dict]) -> list[dict]:
    await a.send_json_to(chat_request(request_id, messages))
    return await receive_until(a, is_done(request_id))


@pytest.mark.parametrize("where", ["frame", "init.body"])
async def test_json_nested_a_thousand_deep_gets_an_error_frame(ws, where):
    a = await open_agent(ws, PATH)
    deep = "[" * 1000 + "]" * 1000
    if where == "frame":
        raw = '{"type": "cf_agent_state", "state": ' + deep + "}"
    else:
        frame = chat_request("r1", [user_message("u1", "x")])
        frame["init"]["body"] = '{"messages": [], "x": ' + deep + "}"
        raw = json.dumps(frame)
    frame = await answer_of(a, raw)
    assert (frame["type"], frame["code"]) == ("cf_agent_error", "too_deep")
    assert frame["error"].endswith(f"is nested too deeply (the limit is {MAX_DEPTH} levels)")
    assert text_of(await turn(a, "r2", [user_message("u2", "still here")])).endswith("still here")


async def test_a_lone_surrogate_in_probe_id_is_echoed_replaced(ws):
    a = await open_agent(ws, PATH)
    frame = await answer_of(a, '{"type": "cf_agent_stream_resume_request", "probeId": "p\\ud800"}')
    assert frame == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": f"p{REPLACEMENT}"}


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff", "\\u0000"])
async def test_lone_surrogates_and_nul_in_user_text_are_stored_replaced(ws, escape):
    a = await open_agent(ws, PATH)
    frame = chat_request("r1", [user_message("u1", "a@b")])
    raw = json.dumps(frame).replace("a@b", f"a{escape}b".replace("\\", "\\\\"))  # escaped in init.body
    await a.send_to(text_data=raw)
    frames = await receive_until(a, is_done("r1"))
    assert text_of(frames) == f"(demo model, offline) You said: a{REPLACEMENT}b"
    stored = await ChatMessage.objects.aget(message_id="u1")
    assert stored.data["parts"][0]["text"] == f"a{REPLACEMENT}b"


async def test_an_unknown_field_in_a_part_does_not_poison_the_conversation(ws):
    """It is kept (the client gets back what it sent) and the model never sees it, turn after turn."""
    a = await open_agent(ws, PATH)
    odd = {"id": "u1", "role": "user", "createdAt": "2026-01-01",
           "parts": [{"type": "text", "text": "first", "providerOptions": {"x": 1}, "whatever": True}]}
    first = await turn(a, "r1", [odd])
    assert text_of(first) == "(demo model, offline) You said: first"
    history = [m async for m in _messages()]
    assert history[0]["parts"][0]["whatever"] is True
    second = await turn(a, "r2", [*history, user_message("u2", "second")])
    assert text_of(second) == "(demo model, offline) You said: second"
    assert [t async for t in Turn.objects.values_list("status", flat=True)] == ["completed", "completed"]


async def _messages():
    async for row in ChatMessage.objects.order_by("position"):
        yield row.data


async def test_a_message_the_model_cannot_read_is_refused_in_one_line_and_not_stored(ws):
    a = await open_agent(ws, PATH)
    bad = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": 42}]}
    frame = await answer_of(a, json.dumps(chat_request("r1", [bad])))
    assert frame == {"type": "cf_agent_error", "code": "invalid_message", "id": "r1",
                     "error": "The model cannot read message 'u1', part 0 (text): text: Input should be a valid string"}
    assert not await ChatMessage.objects.aexists()
    assert text_of(await turn(a, "r2", [user_message("u2", "fine")])).endswith("fine")


async def test_set_messages_with_an_unreadable_message_is_refused(ws):
    a = await open_agent(ws, PATH)
    frame = await answer_of(a, json.dumps({"type": "cf_agent_chat_messages",
                                           "messages": [{"id": "u1", "role": "user", "parts": [{"type": "nope"}]}]}))
    assert (frame["code"], frame["error"]) == (
        "invalid_message", "The model cannot read message 'u1', part 0: unknown part type 'nope'")
    assert not await ChatMessage.objects.aexists()


@override_settings(AGENT_MAX_MESSAGES_PER_REQUEST=3)
async def test_too_many_messages_in_one_request(ws):
    a = await open_agent(ws, PATH)
    frame = await answer_of(a, json.dumps(chat_request("r1", [user_message(f"u{i}", "x") for i in range(4)])))
    assert (frame["code"], frame["id"], frame["error"]) == (
        "too_many_messages", "r1", "4 messages in one request; the limit is 3")
    assert not await ChatMessage.objects.aexists()


@override_settings(AGENT_FRAME_RATE={"per_second": 0.001, "burst": 3})
async def test_frames_beyond_the_rate_are_dropped_with_an_error_frame(ws):
    a = await open_agent(ws, PATH)
    probe = json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    answers = [await answer_of(a, probe) for _ in range(4)]
    assert [f["type"] for f in answers[:3]] == ["cf_agent_stream_resume_none"] * 3
    assert answers[3] == {"type": "cf_agent_error", "code": "rate_limited",
                          "error": "Too many frames: slow down (this frame was dropped)"}


@override_settings(AGENT_MAX_ACTIVE_TURNS_PER_USER=1)
async def test_turns_beyond_the_users_limit_are_refused(ws):
    a = await open_agent(ws, PATH)
    b = await open_agent(ws, "/agents/demo-agent/hostile-2")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 40 20")]))
    await receive_until(a, lambda f: f.get("type") == RESP)
    frame = await answer_of(b, json.dumps(chat_request("r2", [user_message("u2", "another")])))
    assert (frame["code"], frame["id"]) == ("too_many_turns", "r2")
    assert frame["error"] == "You have 1 replies queued or running; wait for one to finish"
    await receive_until(a, is_done("r1"))
    assert text_of(await turn(b, "r3", [user_message("u3", "now")])).endswith("now")


async def test_a_failure_of_ours_is_an_error_frame_not_a_close(ws, monkeypatch):
    from agents_app import turns

    async def broken(*args, **kwargs):
        raise RuntimeError("boom")

    a = await open_agent(ws, PATH)
    monkeypatch.setattr(turns, "cancel", broken)
    frame = await answer_of(a, '{"type": "cf_agent_chat_request_cancel", "id": "r1"}')
    assert frame == {"type": "cf_agent_error", "code": "internal_error",
                     "error": "The server could not handle this frame; nothing was changed by it"}
    monkeypatch.undo()
    assert text_of(await turn(a, "r2", [user_message("u2", "alive")])).endswith("alive")
