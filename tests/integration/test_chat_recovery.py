"""Durable chat recovery in one process (docs/architecture.md#crash-recovery; the cases of the
reference's ``chat-recovery.test.ts`` and ``durable-chat-recovery.test.ts``): a turn cut by a crash is
re-run or continued, within budgets.

A crash is a ``Turn`` left ``running`` by a process that no longer exists (as after ``kill -9``),
with the chunks it had stored. ``turns.recover_interrupted()`` is the beat sweep's call. The
real thing, with ``kill -9`` of real servers, is in ``tests/crossprocess/test_recovery_processes.py``.
"""

import asyncio
import json
import os
import socket
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from agents_app import ChatRecovery, transcript, turns
from agents_app.actions import ledger
from agents_app.handles import AgentHandle
from agents_app.models import AgentInstance, RecoveryIncident, StreamSegment, Turn
from agents_app.recovery import service as recovery
from agents_app.recovery.policy import TERMINAL_MESSAGE, Kind
from agents_app.streaming import buffer
from tests.agents import RECOVERY_CALLS, STALL_RUNS, RecoveryAgent, StallAgent
from tests.support.frames import RESP, is_done, message_text, open_agent, receive_until

pytestmark = pytest.mark.django_db(transaction=True)

# A process that cannot exist on this host (pids stay below 2**22).
DEAD = f"{socket.gethostname()}:{2**22 + os.getpid()} specific.x!dead"
# The demo model's answer to "/burst 6".
WHOLE = "w0 w1 w2 w3 w4 w5 "


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    RECOVERY_CALLS.clear()
    STALL_RUNS.clear()
    monkeypatch.setattr(RecoveryAgent, "recovery_options", {})
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", True)


def text_chunks(*words: str, message_id: str = "m-cut") -> list[dict[str, Any]]:
    return [{"type": "start", "messageId": message_id}, {"type": "start-step"}, {"type": "text-start", "id": "t"},
            *({"type": "text-delta", "id": "t", "delta": w} for w in words)]


def crash(instance: AgentInstance, *, text: str = "/burst 6", chunks: list[dict[str, Any]] | None = None,
          request_id: str = "r-cut", started_ago: float = 0, client_tools: list[dict[str, Any]] | None = None,
          recovery_data: Any = None) -> Turn:
    """A user message whose turn was running in a process that died, having stored ``chunks``."""
    user_id = f"u-{request_id}"
    transcript.save_message(instance, {"id": user_id, "role": "user", "parts": [{"type": "text", "text": text}]})
    turn = Turn.objects.create(
        instance=instance, request_id=request_id, status=Turn.Status.RUNNING, message_ids=[user_id], worker=DEAD,
        started_at=timezone.now() - timedelta(seconds=started_ago), body={"lang": "en"},
        client_tools=client_tools, recovery_data=recovery_data,
    )
    if chunks is not None:
        stream = buffer.start(turn, "m-cut")
        StreamSegment.objects.create(stream=stream, first_index=0,
                                     bodies=json.dumps([json.dumps(c) for c in chunks]))
    return turn


async def instance_of(user: Any, name: str, agent: type = RecoveryAgent) -> AgentHandle:
    return await agent.aget(name, owner=user)


async def messages(handle: AgentHandle) -> list[dict[str, Any]]:
    return await database_sync_to_async(transcript.load)(handle.instance)


async def replies(handle: AgentHandle) -> list[str]:
    return [message_text(m) for m in await messages(handle) if m["role"] == "assistant"]


async def incident() -> RecoveryIncident:
    return await RecoveryIncident.objects.aget()


async def attempt_dies(chunks: list[dict[str, Any]] | None = None) -> None:
    """The queued recovery attempt is claimed by a process that dies at once (after storing ``chunks``)."""
    attempt = await Turn.objects.aget(kind=Turn.Kind.RECOVERY, status=Turn.Status.QUEUED)
    await Turn.objects.filter(pk=attempt.pk).aupdate(status=Turn.Status.RUNNING, worker=DEAD,
                                                    started_at=timezone.now())
    if chunks is not None:
        def store() -> None:
            attempt.status = Turn.Status.RUNNING
            stream = buffer.start(attempt, "m-cut")
            StreamSegment.objects.create(stream=stream, first_index=0,
                                         bodies=json.dumps([json.dumps(c) for c in chunks]))
        await database_sync_to_async(store)()
    assert len(await recovery.recover_interrupted()) == 1


# ------------------------------------------------------------------------------ retry and continue
async def test_a_turn_cut_before_its_first_chunk_is_run_again(user, emitted):
    handle = await instance_of(user, "retry")
    await database_sync_to_async(crash)(handle.instance)
    assert await turns.recover_interrupted() == 1
    assert await replies(handle) == [WHOLE]
    attempt = await Turn.objects.aget(kind=Turn.Kind.RECOVERY)
    assert (attempt.status, attempt.continuation, attempt.priority) == (Turn.Status.COMPLETED, False, 1)
    found = await incident()
    assert (found.incident_id, found.status, found.kind, found.attempt) == ("r-cut:u-r-cut", "completed", "retry", 1)
    names = [name for name, _ in emitted if name.startswith("chat:recovery:")]
    assert names == ["chat:recovery:detected", "chat:recovery:scheduled", "chat:recovery:attempt",
                     "chat:recovery:completed"]


async def test_a_partial_reply_is_continued_in_the_same_message_without_repeating_it(ws, user):
    handle = await instance_of(user, "continue")
    a = await open_agent(ws, "/agents/recovery-agent/continue")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 ", "w1 "))
    assert await turns.recover_interrupted() == 1
    seen = await receive_until(a, lambda f: f.get("type") == "cf_agent_chat_recovering" and not f["recovering"])
    # The cut request ends as recovering; the attempt streams as a continuation of it.
    assert {"body": "", "done": True, "id": "r-cut", "type": RESP, "outcome": "recovering",
            "messageIds": ["u-r-cut"]} in seen
    assert {"type": "cf_agent_chat_recovering", "recovering": True, "id": "r-cut"} in seen
    attempt = await Turn.objects.aget(kind=Turn.Kind.RECOVERY)
    streamed = [json.loads(f["body"]) for f in seen if f.get("id") == attempt.request_id and f["body"]]
    assert all(f["continuation"] for f in seen if f.get("id") == attempt.request_id)
    assert "".join(c.get("delta", "") for c in streamed) == "w2 w3 w4 w5 "
    assert [m["id"] for m in await messages(handle) if m["role"] == "assistant"] == ["m-cut"]
    assert await replies(handle) == [WHOLE]
    assert (await incident()).kind == Kind.CONTINUE


async def test_a_live_turn_judged_dead_leaves_its_end_to_the_recovery(ws, user):
    """A sweep that judges a live turn dead (its heartbeat held up, on a loaded process) cuts it: the
    turn's end and its later chunks store nothing, and the reply is stored once, by the attempt."""
    handle = await instance_of(user, "alive")
    a = await open_agent(ws, "/agents/recovery-agent/alive")
    live = asyncio.ensure_future(handle.save_messages(["/slow 60 50"]))
    await receive_until(a, lambda f: f.get("type") == RESP and '"text-delta"' in f["body"])
    turn = await Turn.objects.aget(status=Turn.Status.RUNNING)
    # As a sweep sees it once its heartbeat is older than the stale bound.
    later = timezone.now() + recovery.liveness.HEARTBEAT_STALE + timedelta(seconds=1)
    sweep = asyncio.ensure_future(turns.recover_interrupted(now=later))
    result = await asyncio.wait_for(live, 30)
    assert await asyncio.wait_for(sweep, 30) == 1
    assert (result.status, result.error) == (Turn.Status.ABORTED, recovery.INTERRUPTED)
    cut = await Turn.objects.select_related("stream").aget(pk=turn.pk)
    assert (cut.status, cut.error) == (Turn.Status.ABORTED, recovery.INTERRUPTED)
    attempt = await Turn.objects.aget(kind=Turn.Kind.RECOVERY)
    assert attempt.status == Turn.Status.COMPLETED
    # The same prompt, uncut, on an instance of its own: the reply the attempt must have stored.
    other = await instance_of(user, "uncut")
    assert (await asyncio.wait_for(other.save_messages(["/slow 60 50"]), 30)).status == Turn.Status.COMPLETED
    assert await replies(handle) == await replies(other)


async def test_the_recovering_status_is_told_to_a_client_connecting_between_attempts(ws, user):
    handle = await instance_of(user, "connect")
    await database_sync_to_async(crash)(handle.instance)
    await recovery.recover_interrupted()  # cut and queued; nobody has run the attempt yet
    # Between attempts (nothing streams, the attempt waits): a queued turn is announced first.
    await Turn.objects.filter(kind=Turn.Kind.RECOVERY).aupdate(status=Turn.Status.SKIPPED)
    b = await ws("/agents/recovery-agent/connect")
    assert await b.receive_json_from() == {"type": "cf_agent_chat_recovering", "recovering": True, "id": "r-cut"}
    assert (await b.receive_json_from())["type"] == "cf_agent_identity"


async def test_only_one_process_cuts_a_turn(user):
    handle = await instance_of(user, "once")
    turn = await database_sync_to_async(crash)(handle.instance)
    first, second = await asyncio.gather(recovery.recover(turn), recovery.recover(turn))
    assert [won is not None for won in (first, second)].count(True) == 1
    assert await Turn.objects.filter(kind=Turn.Kind.RECOVERY).acount() == 1


async def test_a_cleared_conversation_is_not_recovered(user):
    handle = await instance_of(user, "cleared")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "))
    await AgentInstance.objects.filter(pk=handle.instance.pk).aupdate(generation=1)
    assert await turns.recover_interrupted() == 1
    assert not await Turn.objects.filter(kind=Turn.Kind.RECOVERY).aexists()
    assert not await RecoveryIncident.objects.aexists()


# ------------------------------------------------------------------------------ on_chat_recovery
async def test_on_chat_recovery_gets_the_context_with_the_stashed_data(user):
    handle = await instance_of(user, "context")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "),
                                        recovery_data={"step": 3}, client_tools=[{"name": "pick"}])
    await turns.recover_interrupted()
    [ctx] = RECOVERY_CALLS["context"]
    assert (ctx.incident_id, ctx.recovery_root_request_id, ctx.attempt, ctx.max_attempts) == (
        "r-cut:u-r-cut", "r-cut", 1, 10)
    assert (ctx.recovery_kind, ctx.request_id, ctx.stream_id, ctx.partial_text) == (Kind.CONTINUE, "r-cut", "r-cut",
                                                                                     "w0 ")
    assert ctx.partial_parts[-1] == {"type": "text", "text": "w0 ", "state": "streaming"}
    assert (ctx.recovery_data, ctx.last_body) == ({"step": 3}, {"lang": "en"})
    assert ctx.last_client_tools == [{"name": "pick"}]
    assert [m["id"] for m in ctx.messages] == ["u-r-cut"]
    cut_turn = await Turn.objects.aget(request_id="r-cut")
    assert ctx.created_at == cut_turn.started_at  # the interrupted turn's start (docs/architecture.md#attempt)


async def test_stash_during_a_turn_reaches_the_recovery_of_that_turn(user):
    handle = await instance_of(user, "stash")
    result = await handle.save_messages(["/burst 2"])
    stored = await Turn.objects.aget(request_id=result.request_id)
    [user_message] = [m for m in await messages(handle) if m["role"] == "user"]
    assert stored.recovery_data == {"asked": user_message["id"]}


async def test_continue_false_keeps_the_partial_and_runs_nothing(user, monkeypatch, emitted):
    monkeypatch.setattr(RecoveryAgent, "recovery_options", {"continue": False})
    handle = await instance_of(user, "stop")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 ", "w1 "))
    await turns.recover_interrupted()
    assert await replies(handle) == ["w0 w1 "]
    found = await incident()
    assert (found.status, found.reason) == ("skipped", "continue_disabled")
    assert (await Turn.objects.aget(kind=Turn.Kind.RECOVERY)).status == Turn.Status.SKIPPED
    assert "chat:recovery:skipped" in [name for name, _ in emitted]


async def test_persist_false_drops_a_text_partial(user, monkeypatch):
    monkeypatch.setattr(RecoveryAgent, "recovery_options", {"persist": False, "continue": False})
    handle = await instance_of(user, "drop")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "))
    await turns.recover_interrupted()
    assert await replies(handle) == []


async def test_persist_false_still_keeps_settled_tool_results(user, monkeypatch):
    monkeypatch.setattr(RecoveryAgent, "recovery_options", {"persist": False, "continue": False})
    handle = await instance_of(user, "settled")
    chunks = [*text_chunks("Looking "), {"type": "tool-input-available", "toolCallId": "c1", "toolName": "lookup",
                                         "input": {}},
              {"type": "tool-output-available", "toolCallId": "c1", "output": {"found": 1}}]
    await database_sync_to_async(crash)(handle.instance, chunks=chunks)
    await turns.recover_interrupted()
    [reply] = [m for m in await messages(handle) if m["role"] == "assistant"]
    assert [(p["type"], p.get("output")) for p in reply["parts"]] == [("tool-lookup", {"found": 1})]


async def test_a_raising_on_chat_recovery_fails_the_incident_with_the_terminal_message(ws, user, monkeypatch):
    monkeypatch.setattr(RecoveryAgent, "recovery_options", RuntimeError("hook broke"))
    handle = await instance_of(user, "hookfail")
    a = await open_agent(ws, "/agents/recovery-agent/hookfail")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "))
    await turns.recover_interrupted()
    seen = await receive_until(a, lambda f: f.get("type") == "cf_agent_chat_recovering" and not f["recovering"])
    assert {"body": TERMINAL_MESSAGE, "done": True, "id": "r-cut", "type": RESP, "error": True} in seen
    found = await incident()
    assert (found.status, found.error) == ("failed", "hook broke")
    assert await replies(handle) == ["w0 "]


# ------------------------------------------------------------------------------ budgets
async def test_attempts_that_keep_dying_exhaust_the_budget(ws, user, monkeypatch):
    exhausted: list[Any] = []
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", ChatRecovery(max_attempts=3, on_exhausted=exhausted.append))
    handle = await instance_of(user, "loop")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "))
    assert len(await recovery.recover_interrupted()) == 1
    for _ in range(3):
        await attempt_dies()  # each attempt dies before producing anything: attempts 2, 3, 4
    assert (await incident()).attempt == 4
    await turns.drain(handle.instance.pk)
    found = await incident()
    assert (found.status, found.reason, found.attempts_total) == ("exhausted", "max_attempts_exceeded", 4)
    [ctx] = exhausted
    assert (ctx.reason, ctx.recovery_root_request_id, ctx.partial_text, ctx.terminal_message) == (
        "max_attempts_exceeded", "r-cut", "w0 ", TERMINAL_MESSAGE)
    assert await replies(handle) == ["w0 "]
    instance = await AgentInstance.objects.aget(pk=handle.instance.pk)
    assert (instance.terminal_request_id, instance.terminal_error) == ("r-cut", TERMINAL_MESSAGE)
    # A client that comes back later is shown the terminal message (resume ACK case 3).
    b = await open_agent(ws, "/agents/recovery-agent/loop")
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p"})
    assert (await b.receive_json_from())["id"] == "r-cut"
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r-cut"})
    end = await receive_until(b, is_done("r-cut"))
    assert end[-1]["error"] is True and end[-1]["body"] == TERMINAL_MESSAGE


async def test_progress_resets_the_attempt_count(user, monkeypatch):
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", {"max_attempts": 2})
    handle = await instance_of(user, "progress")
    await database_sync_to_async(crash)(handle.instance)
    await recovery.recover_interrupted()
    await attempt_dies()
    assert (await incident()).attempt == 2
    await attempt_dies(chunks=text_chunks("w0 ", "w1 "))  # this one streamed before dying
    found = await incident()
    assert (found.attempt, found.work) == (1, 2)
    await turns.drain(handle.instance.pk)
    assert (await incident()).status == "completed"
    assert await replies(handle) == [WHOLE]


async def test_no_progress_for_too_long_seals_the_incident(user, monkeypatch):
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", {"no_progress_timeout": 60})
    handle = await instance_of(user, "stuck")
    await database_sync_to_async(crash)(handle.instance, started_ago=120)
    await turns.recover_interrupted()
    found = await incident()
    assert (found.status, found.reason) == ("exhausted", "no_progress_timeout")


async def test_the_work_budget_seals_a_runaway(user, monkeypatch):
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", {"max_recovery_work": 0})
    handle = await instance_of(user, "runaway")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "))
    await turns.recover_interrupted()
    assert ((await incident()).status, (await incident()).reason) == ("exhausted", "work_budget_exceeded")


async def test_should_keep_recovering_is_asked_from_the_second_attempt(user, monkeypatch):
    asked: list[int] = []

    def keep(ctx: Any) -> bool:
        asked.append(ctx.attempt)
        return False

    monkeypatch.setattr(RecoveryAgent, "chat_recovery", ChatRecovery(should_keep_recovering=keep))
    handle = await instance_of(user, "predicate")
    await database_sync_to_async(crash)(handle.instance)
    await recovery.recover_interrupted()
    await attempt_dies()
    await turns.drain(handle.instance.pk)
    assert asked == [2]
    assert ((await incident()).status, (await incident()).reason) == ("exhausted", "recovery_aborted")


async def test_a_raising_predicate_means_keep_recovering(user, monkeypatch):
    def keep(ctx: Any) -> bool:
        raise RuntimeError("undecided")

    monkeypatch.setattr(RecoveryAgent, "chat_recovery", ChatRecovery(should_keep_recovering=keep))
    handle = await instance_of(user, "raising")
    await database_sync_to_async(crash)(handle.instance)
    await recovery.recover_interrupted()
    await attempt_dies()
    await turns.drain(handle.instance.pk)
    assert (await incident()).status == "completed"


# ------------------------------------------------------------------------------ repairs and parking
async def test_a_turn_waiting_on_a_client_tool_is_parked_not_rerun(user):
    handle = await instance_of(user, "parked")
    chunks = [*text_chunks(), {"type": "tool-input-available", "toolCallId": "c1", "toolName": "pick",
                               "input": {"n": 1}}]
    await database_sync_to_async(crash)(handle.instance, chunks=chunks, client_tools=[{"name": "pick"}])
    await turns.recover_interrupted()
    found = await incident()
    assert (found.status, found.reason) == ("skipped", "awaiting_interaction")
    assert RECOVERY_CALLS.get("parked") is None
    [reply] = [m for m in await messages(handle) if m["role"] == "assistant"]
    assert reply["parts"][-1]["state"] == "input-available"
    assert await handle.has_pending_interaction()


async def test_interrupted_server_tool_calls_are_answered_before_the_continuation(user):
    handle = await instance_of(user, "repair")
    scope = str(handle.instance.pk)

    def ledger_rows() -> None:
        """``done`` ran and settled before the crash; ``mid`` was still executing."""
        for call in ("done", "mid"):
            ledger.claim(f"tool:{call}", scope=scope, action_name="refund", input_hash="h", tool_call_id=call,
                         retryable=False)
        ledger.settle("tool:done", {"ok": True}, scope=scope)

    await database_sync_to_async(ledger_rows)()
    chunks = [*text_chunks(), *(
        {"type": "tool-input-available", "toolCallId": call, "toolName": "refund", "input": {}}
        for call in ("done", "mid", "never"))]
    await database_sync_to_async(crash)(handle.instance, chunks=chunks)
    await turns.recover_interrupted()
    [reply] = [m for m in await messages(handle) if m["role"] == "assistant"]
    parts = {p["toolCallId"]: p for p in reply["parts"] if p.get("toolCallId")}
    assert (parts["done"]["state"], parts["done"]["output"]) == ("output-available", {"ok": True})
    assert parts["mid"]["output"]["error"]["name"] == "ActionPendingError"
    assert (parts["never"]["state"], parts["never"]["errorText"]) == ("output-error", recovery.INTERRUPTED_TOOL_CALL)
    # The continuation went on after the answered calls, in the same message.
    assert (await incident()).status == "completed"
    assert "refund" in message_text(reply)


# ------------------------------------------------------------------------------ stall watchdog
async def test_a_stalled_stream_is_cut_into_recovery_with_a_clean_done(ws, user):
    a = await open_agent(ws, "/agents/stall-agent/stall")
    handle = await instance_of(user, "stall", StallAgent)
    result = await asyncio.wait_for(handle.save_messages(["go"]), 15)
    assert result.status == "aborted"
    seen = await receive_until(a, lambda f: f.get("type") == "cf_agent_chat_recovering" and not f["recovering"])
    done = [f for f in seen if f.get("id") == result.request_id and f.get("done")]
    assert done == [{"body": "", "done": True, "id": result.request_id, "type": RESP, "outcome": "recovering",
                     "messageIds": done[0]["messageIds"]}]
    assert STALL_RUNS["stall"] == 2
    assert await replies(handle) == ["one two three four."]
    cut = await Turn.objects.aget(request_id=result.request_id)
    assert (cut.status, cut.error) == (Turn.Status.ABORTED, recovery.STALLED)
    assert (await incident()).status == "completed"


async def test_chat_callbacks_hear_of_a_stalled_turn_as_interrupted(user):
    handle = await instance_of(user, "stalled-chat", StallAgent)
    calls: list[str] = []

    class Callback:
        def on_start(self, info: dict[str, Any]) -> None:
            calls.append("start")

        def on_event(self, chunk: str) -> None:
            calls.append("event")

        def on_done(self) -> None:
            calls.append("done")

        def on_error(self, message: str) -> None:
            calls.append("error")

        def on_interrupted(self) -> None:
            calls.append("interrupted")

    await asyncio.wait_for(handle.chat("go", Callback()), 15)
    assert calls[0] == "start" and calls[-1] == "interrupted"
    assert "done" not in calls and "error" not in calls


async def test_a_healthy_stream_is_untouched_by_an_armed_watchdog(user):
    STALL_RUNS["healthy"] = 1  # not the first run: it does not stall
    handle = await instance_of(user, "healthy", StallAgent)
    result = await asyncio.wait_for(handle.save_messages(["go"]), 15)
    assert result.status == "completed"
    assert not await RecoveryIncident.objects.aexists()


async def test_finished_incidents_are_swept_after_a_week(user):
    handle = await instance_of(user, "sweep")
    await database_sync_to_async(crash)(handle.instance)
    await turns.recover_interrupted()
    later = timezone.now() + recovery.INCIDENT_RETENTION + timedelta(minutes=1)
    assert await database_sync_to_async(recovery.sweep_expired)(now=later) == 1
    assert not await RecoveryIncident.objects.aexists()
