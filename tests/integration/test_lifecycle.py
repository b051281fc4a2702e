"""An instance's life around its turns (docs/architecture.md#connection-hooks, #destroy), against the
reference's documented behaviour: ``on_connect``/``on_close``, ``messages`` outside a turn and
``get_messages``, ``destroy()``, ``save_messages`` after a clear, and ``continue_last_turn``'s two modes.
Sockets are Channels' communicators against the real ASGI application."""

import asyncio
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from agents_app import transcript
from agents_app.demo.agents import DemoAgent
from agents_app.llm.demo import GOING_ON
from agents_app.models import AgentInstance, LedgerEntry, Schedule, StreamRecord, Turn
from agents_app.schedules import runs
from tests.agents import GATE, STARTED, SlowStreamAgent
from tests.conftest import connect
from tests.lifecycle_agents import SEEN, TranscriptAgent, served
from tests.support.frames import (
    RESP,
    chat_request,
    chunks,
    is_done,
    message_text,
    open_agent,
    receive_until,
    user_message,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)

PATIENCE = 15


@pytest.fixture(autouse=True)
def lifecycle_agents() -> Iterator[None]:
    for record in (SEEN, STARTED, GATE):
        record.clear()
    with served():
        yield


async def connect_frames(a: Any) -> list[dict[str, Any]]:
    """What a new connection gets before it asks anything: frames up to the MCP servers frame."""
    return await receive_until(a, lambda f: f["type"] == "cf_agent_mcp_servers")


# ------------------------------------------------------------------------------- connection hooks
async def test_on_connect_sends_a_frame_to_the_new_connection_alone(ws, user):
    """The reference calls ``onConnect(connection, ctx)`` once per new socket, with the upgrade
    request; what it sends with ``connection.send`` reaches that socket and no other."""
    a = await ws("/agents/greeter-agent/room")
    first = await connect_frames(a)
    assert first[0] == {"type": "greeting", "user": "alice", "messages": 0, "origin": "http://localhost"}
    assert [f["type"] for f in first[1:]] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    b = await ws("/agents/greeter-agent/room")
    assert (await connect_frames(b))[0]["type"] == "greeting"
    assert await a.receive_nothing(0.1)
    assert [kind for kind, *_ in SEEN["room"]] == ["connect", "connect"]


async def test_on_connect_refuses_with_its_code_and_reason_and_nothing_of_the_conversation_goes_out(user):
    """A connection the hook closes (the reference: ``connection.close(code, reason)`` in
    ``onConnect``) gets that close code and reason; here no frame of the conversation precedes it."""
    communicator, connected, _ = await connect("/agents/greeter-agent/closed-door?refuse=members%20only", user)
    assert connected
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4401, "reason": "members only"}
    await communicator.disconnect()
    await eventually(lambda: _closes("closed-door"), "on_close of the refused socket", timeout=PATIENCE)
    assert not await AgentInstance.objects.filter(name="closed-door").aexists()
    # An address nobody wrote to has no stored conversation: its messages are empty.
    assert SEEN["closed-door"][0][2] == []


async def _closes(name: str) -> list[tuple[Any, ...]]:
    return [entry for entry in SEEN.get(name, []) if entry[0] == "close"]


async def test_on_close_gets_the_code_the_socket_closed_with(ws):
    """The reference's ``onClose(connection, code, reason)`` runs when a socket goes, for that connection."""
    a = await ws("/agents/greeter-agent/leaving")
    await connect_frames(a)
    await a.disconnect(code=4000)
    [(_, connected_id, *_)] = [e for e in SEEN["leaving"] if e[0] == "connect"]
    [closed] = await eventually(lambda: _closes("leaving"), "on_close", timeout=PATIENCE)
    assert closed == ("close", connected_id, 4000, "")


async def test_on_connect_sees_the_stored_transcript_as_messages(ws):
    """Outside a turn ``this.messages`` is the stored conversation (the reference keeps it loaded)."""
    a = await ws("/agents/greeter-agent/history")
    await connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "hello")]))
    await receive_until(a, is_done("r1"), timeout=PATIENCE)
    b = await ws("/agents/greeter-agent/history")
    assert (await connect_frames(b))[0]["messages"] == 2
    assert SEEN["history"][-1][2] == ["user", "assistant"]


async def test_an_on_connect_that_raises_is_logged_and_the_connection_goes_on(ws, caplog):
    """The reference routes a throwing ``onConnect`` to ``onError`` (logged); the socket stays."""
    a = await ws("/agents/raising-greeter-agent/broken")
    assert [f["type"] for f in await connect_frames(a)] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    assert "on_connect of" in caplog.text and "greeter is broken" in caplog.text
    await a.send_json_to(chat_request("r1", [user_message("u1", "still here?")]))
    assert (await receive_until(a, is_done("r1"), timeout=PATIENCE))[-1]["done"] is True


# ------------------------------------------------------------------------------- messages outside a turn
async def test_get_messages_reads_the_transcript_from_code(user):
    """``this.messages`` read from outside the agent: the handle's ``get_messages()``."""
    handle = await DemoAgent.aget("read-me", owner=user)
    assert await handle.get_messages() == []
    await handle.save_messages(["hi"])
    messages = await handle.get_messages()
    assert messages == await database_sync_to_async(transcript.load)(handle.instance)
    assert [m["role"] for m in messages] == ["user", "assistant"]


async def test_on_chat_response_sees_the_transcript_with_its_reply(user):
    """The reference's ``onChatResponse`` runs after the reply is persisted: ``this.messages`` holds it."""
    handle = await TranscriptAgent.aget("after", owner=user)
    first = await handle.save_messages(["one"])
    second = await handle.save_messages(["two"])
    assert SEEN["after"] == [
        ("response", first.request_id, ["user", "assistant"]),
        ("response", second.request_id, ["user", "assistant", "user", "assistant"]),
    ]


async def test_a_callable_method_sees_the_transcript(ws, user):
    """A client-callable method runs outside a turn and reads ``this.messages`` as stored."""
    await (await TranscriptAgent.aget("rpc", owner=user)).save_messages(["one"])
    a = await ws("/agents/transcript-agent/rpc")
    await connect_frames(a)
    await a.send_json_to({"type": "rpc", "id": "c1", "method": "message_count", "args": []})
    answer = await receive_until(a, lambda f: f["type"] == "rpc")
    assert answer[-1] == {"done": True, "id": "c1", "result": 2, "success": True, "type": "rpc"}


async def test_a_scheduled_method_sees_the_transcript(user):
    """A scheduled callback runs outside a turn and reads ``this.messages`` as stored."""
    handle = await TranscriptAgent.aget("cron", owner=user)
    await handle.save_messages(["one"])
    await handle.schedule(0, "remember", {"note": "x"})
    await runs.tick(now=timezone.now() + timedelta(seconds=1))
    assert [e for e in SEEN["cron"] if e[0] == "scheduled"] == [("scheduled", {"note": "x"}, ["user", "assistant"])]


# ------------------------------------------------------------------------------- destroy
async def test_destroy_cancels_the_running_turn_then_deletes_all_the_instance_stored(ws, user, emitted):
    """The reference's ``destroy()`` aborts the instance's requests, then deletes all of its storage
    (messages, stream buffers, schedules) and closes its sockets; the name is then a new, empty agent."""
    a = await open_agent(ws, "/agents/slow-stream-agent/doomed")
    GATE["doomed"] = asyncio.Event()
    await a.send_json_to(chat_request("r1", [user_message("u1", "first")], gate=True))
    await eventually(lambda: _started("doomed"), "the held turn to start", timeout=PATIENCE)
    handle = await SlowStreamAgent.aget("doomed", owner=user)
    child = await handle.sub_agent(DemoAgent, "helper")
    await child.save_messages(["child work"])
    await handle.schedule(3600, "on_chat_response")
    pk, child_pk = handle.instance.pk, child.instance.pk
    now = timezone.now()
    for scope in (str(pk), str(child_pk), "other"):
        await LedgerEntry.objects.acreate(
            scope=scope, key=f"tool:{scope}", action_name="x", input_hash="h", created_at=now, updated_at=now
        )
    observer = await ws("/agents/slow-stream-agent/doomed")
    await connect_frames(observer)

    removed = await handle.destroy()

    assert (removed.instances, removed.ledger_rows) == (2, 2)
    # The parent's user message (its held reply had no content yet) and the child's two; a turn each.
    assert (removed.messages, removed.turns) == (3, 2)
    assert [d["status"] for n, d in emitted if n == "chat:turn:finish" and d["requestId"] == "r1"] == ["aborted"]
    for model in (AgentInstance, Turn, StreamRecord, Schedule):
        assert not await model.objects.filter(
            **{"pk__in" if model is AgentInstance else "instance_id__in": [pk, child_pk]}
        ).aexists(), model
    assert [row.scope async for row in LedgerEntry.objects.all()] == ["other"]
    frames = await receive_until(observer, lambda f: f["type"] == "cf_agent_chat_clear", timeout=PATIENCE)
    assert frames[-1] == {"type": "cf_agent_chat_clear"}
    assert await observer.receive_output(timeout=5) == {"type": "websocket.close", "code": 1000, "reason": "destroyed"}
    # The address now names a new, empty conversation, which works as any other.
    again = await SlowStreamAgent.aget("doomed", owner=user)
    assert again.instance.pk != pk and await again.get_messages() == []
    assert (await again.save_messages(["anew"])).status == "completed"


async def _started(name: str) -> bool:
    return bool(STARTED.get(name))


# ------------------------------------------------------------------------------- save_messages after a clear
async def test_save_messages_queued_then_cleared_stores_nothing_and_runs_no_model(ws, user):
    """As the reference's "marks queued programmatic turns as skipped after chat clear": the result is
    ``skipped``, the model never starts for it, and its user message is not in the transcript
    (the reference checks the generation before storing; so do we, at the turn's start)."""
    a = await open_agent(ws, "/agents/slow-stream-agent/cleared-queue")
    GATE["cleared-queue"] = asyncio.Event()
    await a.send_json_to(chat_request("r1", [user_message("u1", "first")], gate=True))
    await eventually(lambda: _started("cleared-queue"), "the held turn to start", timeout=PATIENCE)
    handle = await SlowStreamAgent.aget("cleared-queue", owner=user)
    queued = asyncio.ensure_future(handle.save_messages(["Skipped"]))
    await eventually(lambda: Turn.objects.filter(kind="programmatic").aexists(), "the turn to queue", timeout=PATIENCE)
    await a.send_json_to({"type": "cf_agent_chat_clear"})
    assert (await asyncio.wait_for(queued, PATIENCE)).status == "skipped"
    assert [rid for rid, _ in STARTED["cleared-queue"]] == ["r1"]
    assert "Skipped" not in json.dumps(await handle.get_messages())


async def test_a_clear_while_the_message_function_runs_skips_the_turn_and_stores_nothing(user):
    """The reference resolves a function's messages when the turn starts, then checks the clear
    generation again before storing them: a clear in between makes the turn ``skipped``, nothing stored."""
    handle = await SlowStreamAgent.aget("cleared-fn", owner=user)
    await handle.persist_messages(["before"])
    called, proceed = asyncio.Event(), asyncio.Event()

    async def messages(current: list[dict[str, Any]]) -> list[str]:
        called.set()
        await proceed.wait()
        return ["computed"]

    pending = asyncio.ensure_future(handle.save_messages(messages))
    await asyncio.wait_for(called.wait(), PATIENCE)
    from agents_app import turns

    await turns.clear(handle.instance, "")
    proceed.set()
    assert (await asyncio.wait_for(pending, PATIENCE)).status == "skipped"
    assert await handle.get_messages() == []
    assert STARTED.get("cleared-fn") is None


# ------------------------------------------------------------------------------- continue_last_turn
async def _continue_frames(ws: Any, user: Any, name: str, *, append: bool) -> tuple[list[dict[str, Any]], Any]:
    a = await open_agent(ws, f"/agents/demo-agent/{name}")
    await a.send_json_to(chat_request("r1", [user_message("u1", "hello")]))
    await receive_until(a, is_done("r1"), timeout=PATIENCE)
    handle = await DemoAgent.aget(name, owner=user)
    result = await handle.continue_last_turn(append=append)
    assert result.status == "completed"
    return await receive_until(a, is_done(result.request_id), timeout=PATIENCE), handle


async def test_continue_last_turn_append_extends_the_last_reply_as_ai_chat_agent_does(ws, user):
    """AIChatAgent's ``continueLastTurn`` runs a continuation: its frames say ``continuation: true``,
    the ``start`` chunk carries no ``messageId`` (the client extends its last assistant message), and
    the reply is stored in that same message, under its id."""
    frames, handle = await _continue_frames(ws, user, "append", append=True)
    stream = [f for f in frames if f.get("type") == RESP]
    assert stream and all(f.get("continuation") is True for f in stream)
    start = next(c for c in chunks(frames) if c["type"] == "start")
    assert "messageId" not in start
    assert not any(c["type"] == "message-metadata" and "continuation" in c["messageMetadata"] for c in chunks(frames))
    messages = await handle.get_messages()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    before = message_text(messages[1])
    assert before.endswith(GOING_ON) and before != GOING_ON
    assert "continuation" not in (messages[1].get("metadata") or {})


async def test_continue_last_turn_default_writes_a_new_message_as_think_does(ws, user):
    """Think's ``continueLastTurn`` writes a new assistant message: the ``start`` chunk names the new
    message's id, marked ``continuation: true`` in its metadata."""
    frames, handle = await _continue_frames(ws, user, "new-message", append=False)
    start = next(c for c in chunks(frames) if c["type"] == "start")
    messages = await handle.get_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert start["messageId"] == messages[2]["id"] != messages[1]["id"]
    assert messages[2]["metadata"]["continuation"] is True


# ------------------------------------------------------------------------------- the README's example
async def test_the_readme_connection_example_runs_as_written(ws, user):
    """README "Connections, messages outside a turn, destroy": the refusal and the welcome frame."""
    from tests.integration.test_readme_example import readme_module

    with readme_module("### Connections, `messages` outside a turn, destroy", "readme_connections", "SupportAgent"):
        communicator, connected, _ = await connect("/agents/support-agent/shop?plan=expired", user)
        assert connected
        closed = await communicator.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": 4402, "reason": "Your plan has expired"}
        await communicator.disconnect()
        a = await ws("/agents/support-agent/shop")
        assert (await connect_frames(a))[0] == {"type": "welcome", "messages": 0}
        await a.disconnect()
