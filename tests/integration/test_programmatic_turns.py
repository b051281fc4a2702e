"""Turns started from Python (docs/architecture.md#programmatic-turns; the cases of the reference's
``programmatic-turns.test.ts``, ``on-stream-end.test.ts`` and ``continue-last-turn.test.ts``):
``save_messages`` with messages or a function and a signal, ``persist_messages``,
``continue_last_turn``, ``cancel_chat``, and ``on_chat_response`` chaining.
"""

import asyncio
from typing import Any

import pytest
from channels.db import database_sync_to_async

from agents_app import AbortSignal, transcript
from agents_app.demo.agents import DemoAgent
from agents_app.llm.demo import GOING_ON
from agents_app.models import Turn
from tests.agents import GATE, HOOK_CALLS, STARTED, SUMMARY_REQUEST, ChainAgent, SlowStreamAgent
from tests.support.frames import chat_request, is_done, open_agent, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)

PATIENCE = 15


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    for record in (STARTED, GATE, HOOK_CALLS):
        record.clear()


async def texts(handle: Any) -> list[tuple[str, str]]:
    messages = await database_sync_to_async(transcript.load)(handle.instance)
    return [(m["role"], "".join(p.get("text", "") for p in m["parts"])) for m in messages]


async def until(predicate: Any, what: str) -> None:
    async with asyncio.timeout(PATIENCE):
        while not await predicate():
            await asyncio.sleep(0.02)


async def hold(ws: Any, name: str) -> Any:
    """A WebSocket turn of SlowStreamAgent/name that runs until the test opens GATE[name]."""
    a = await open_agent(ws, f"/agents/slow-stream-agent/{name}")
    GATE[name] = asyncio.Event()
    await a.send_json_to(chat_request("r1", [user_message("u1", "first")], gate=True))
    await until(lambda: _started(name), "the held turn to start")
    return a


async def test_save_messages_is_queued_behind_an_active_websocket_turn(ws, user):
    await hold(ws, "queued")
    handle = await SlowStreamAgent.aget("queued", owner=user)
    programmatic = asyncio.ensure_future(handle.save_messages(["second"]))
    await until(lambda: Turn.objects.filter(kind="programmatic").aexists(), "the programmatic turn to queue")
    assert [rid for rid, _ in STARTED["queued"]] == ["r1"]
    GATE["queued"].set()
    result = await asyncio.wait_for(programmatic, PATIENCE)
    assert result.status == "completed"
    assert [rid for rid, _ in STARTED["queued"]] == ["r1", result.request_id]


async def test_the_function_form_sees_what_was_queued_before_it(ws, user):
    await hold(ws, "fn")
    handle = await SlowStreamAgent.aget("fn", owner=user)
    seen: list[list[str]] = []

    async def follow_up(current: list[dict[str, Any]]) -> list[str]:
        seen.append([m["role"] for m in current])
        return [f"after {len(current)} messages"]

    programmatic = asyncio.ensure_future(handle.save_messages(follow_up))
    await until(lambda: Turn.objects.filter(kind="programmatic").aexists(), "the programmatic turn to queue")
    assert seen == []  # not evaluated while the turn before it runs
    GATE["fn"].set()
    assert (await asyncio.wait_for(programmatic, PATIENCE)).status == "completed"
    assert seen == [["user", "assistant"]]
    assert (await texts(handle))[2] == ("user", "after 2 messages")


async def test_a_function_that_raises_fails_the_turn_without_running_the_model(user):
    handle = await SlowStreamAgent.aget("fn-raises", owner=user)

    def broken(current: list[dict[str, Any]]) -> list[str]:
        raise ValueError("no messages for you")

    result = await handle.save_messages(broken)
    assert (result.status, result.error) == ("error", "no messages for you")
    assert STARTED.get("fn-raises") is None


@pytest.mark.parametrize(("text", "status"), [("/fail", "error"), ("hello", "completed")])
async def test_status_of_in_band_errors_and_completions(user, text, status):
    result = await (await DemoAgent.aget(f"status-{status}", owner=user)).save_messages([text])
    assert result.status == status


async def test_a_thrown_stream_is_an_error(user):
    from tests.agents import BrokenAgent

    result = await (await BrokenAgent.aget("thrown", owner=user)).save_messages(["hi"])
    assert (result.status, result.error) == ("error", "agent exploded")


async def test_queued_programmatic_turns_are_skipped_after_a_clear(ws, user):
    a = await hold(ws, "cleared")
    handle = await SlowStreamAgent.aget("cleared", owner=user)
    programmatic = asyncio.ensure_future(handle.save_messages(["second"]))
    await until(lambda: Turn.objects.filter(kind="programmatic").aexists(), "the programmatic turn to queue")
    await a.send_json_to({"type": "cf_agent_chat_clear"})
    assert (await asyncio.wait_for(programmatic, PATIENCE)).status == "skipped"


# ------------------------------------------------------------------------------------------ signal
async def test_a_signal_never_aborted_completes(user):
    result = await (await DemoAgent.aget("signal-never", owner=user)).save_messages(["hi"], signal=AbortSignal())
    assert result.status == "completed"


async def test_a_pre_aborted_signal_stores_the_messages_and_runs_no_model(user):
    signal = AbortSignal()
    signal.abort("not now")
    handle = await SlowStreamAgent.aget("signal-pre", owner=user)
    result = await handle.save_messages(["hi"], signal=signal)
    assert result.status == "aborted"
    assert STARTED.get("signal-pre") is None
    assert await texts(handle) == [("user", "hi")]


async def test_a_signal_aborted_mid_stream_keeps_the_partial_reply(user):
    signal = AbortSignal()
    handle = await SlowStreamAgent.aget("signal-mid", owner=user)
    GATE["signal-mid"] = asyncio.Event()
    running = asyncio.ensure_future(handle.save_messages(
        [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]}], signal=signal))
    await until(lambda: _started("signal-mid"), "the turn to start")
    signal.abort("stop")
    result = await asyncio.wait_for(running, PATIENCE)
    assert result.status == "aborted"


async def _started(name: str) -> bool:
    return bool(STARTED.get(name))


async def test_aborting_a_signal_after_completion_does_nothing(user):
    signal = AbortSignal()
    handle = await DemoAgent.aget("signal-after", owner=user)
    assert (await handle.save_messages(["hi"], signal=signal)).status == "completed"
    signal.abort("too late")
    await asyncio.sleep(0)
    assert [t.status async for t in Turn.objects.all()] == ["completed"]


async def test_cancel_chat_keeps_the_partial_reply_and_ignores_unknown_or_finished_turns(ws, user):
    a = await open_agent(ws, "/agents/demo-agent/cancel-chat")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 100 20")]))
    await receive_until(a, lambda f: '"w2 "' in f.get("body", ""), timeout=PATIENCE)
    handle = await DemoAgent.aget("cancel-chat", owner=user)
    assert await handle.cancel_chat("r1", "enough") is True
    frames = await receive_until(a, is_done("r1"), timeout=PATIENCE)
    assert frames[-1]["outcome"] == "aborted"
    assert (await texts(handle))[-1][1].startswith("w0 w1 w2 ")
    assert await handle.cancel_chat("r1") is False
    assert await handle.cancel_chat("nope") is False
    assert await handle.cancel_all_chats() == 0


# ------------------------------------------------------------------------ persist / continue
async def test_persist_messages_stores_and_shows_them_without_a_turn(ws, user):
    a = await open_agent(ws, "/agents/demo-agent/persist")
    handle = await DemoAgent.aget("persist", owner=user)
    stored = await handle.persist_messages(["a note", user_message("u9", "another")])
    assert [m["parts"][0]["text"] for m in stored] == ["a note", "another"]
    frame = await a.receive_json_from(timeout=PATIENCE)
    assert (frame["type"], frame["messages"]) == ("cf_agent_chat_messages", stored)
    assert not await Turn.objects.aexists()


async def test_continue_last_turn_writes_a_new_reply_marked_as_a_continuation(user):
    handle = await DemoAgent.aget("continue", owner=user)
    assert (await handle.save_messages(["hello"])).status == "completed"
    result = await handle.continue_last_turn()
    assert result.status == "completed"
    messages = await database_sync_to_async(transcript.load)(handle.instance)
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[2]["metadata"]["continuation"] is True
    assert messages[2]["id"] != messages[1]["id"]
    assert "".join(p.get("text", "") for p in messages[2]["parts"]) == GOING_ON


async def test_continue_last_turn_is_skipped_without_an_assistant_message_to_continue(user):
    handle = await DemoAgent.aget("no-continue", owner=user)
    assert (await handle.continue_last_turn()).request_id == ""
    await handle.persist_messages(["only a user message"])
    result = await handle.continue_last_turn()
    assert (result.request_id, result.status) == ("", "skipped")


async def test_continue_last_turn_over_the_websocket_reaches_connected_clients(ws, user):
    a = await open_agent(ws, "/agents/demo-agent/continue-live")
    await a.send_json_to(chat_request("r1", [user_message("u1", "hello")]))
    await receive_until(a, is_done("r1"))
    result = await (await DemoAgent.aget("continue-live", owner=user)).continue_last_turn({"custom": 1})
    frames = await receive_until(a, is_done(result.request_id), timeout=PATIENCE)
    assert text_of(frames) == GOING_ON
    assert (await Turn.objects.aget(request_id=result.request_id)).body == {"custom": 1}


# ------------------------------------------------------------------------- on_chat_response
async def test_save_messages_in_on_chat_response_runs_one_follow_up_turn_without_recursion(ws, user):
    a = await open_agent(ws, "/agents/chain-agent/chain")
    await a.send_json_to(chat_request("r1", [user_message("u1", "research this")]))
    await receive_until(a, is_done("r1"))
    follow_up = await receive_until(a, lambda f: f.get("done") is True and f.get("id") != "r1", timeout=PATIENCE)
    await until(lambda: _hooks_done("chain", 2), "both hooks to return")
    handle = await ChainAgent.aget("chain", owner=user)
    assert [role for role, _ in await texts(handle)] == ["user", "assistant", "user", "assistant"]
    assert (await texts(handle))[2] == ("user", SUMMARY_REQUEST)
    second = follow_up[-1]["id"]
    # The follow-up's hook ran after the first one returned, not inside it.
    assert HOOK_CALLS["chain"] == [("enter", "r1"), ("exit", "r1"), ("enter", second), ("exit", second)]
    assert await Turn.objects.acount() == 2


async def _hooks_done(name: str, count: int) -> bool:
    return sum(kind == "exit" for kind, _ in HOOK_CALLS.get(name, [])) >= count
