"""Durable-pause actions, parked and decided later (docs/architecture.md#durable-pause): the reference's
cases, on our stack.

The reference's ``pauseAction`` is ``ActionTestAgent``'s (``tests.action_agents``): durable pause,
summary "Approve pause action", risk high, permission ``pause:run``; its execute returns
``"paused-exec: <message>"`` and counts itself in ``PROBES[name].pause_count``. Every call here
is parked by a real turn of the offline demo model (``/tool pauseAction {...}``, tool call id
``demo_<n>_0``) and decided through ``approvals`` or the agent handle, as staff would. In the
test settings the continuation turn runs inline, before the decision returns.

The validation case ("durable-pause with approval: false" is refused) is in
``tests/unit/test_actions_pure.py``; the admin and the API have their own modules. The reference's
codemode cases ("paused-output descriptor derivation") have no counterpart: there is no codemode
runtime in this port.
"""

import asyncio
import json
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from agents_app import events, transcript, turns
from agents_app.approvals import service as approvals
from agents_app.approvals import tasks as approval_tasks
from agents_app.models import (
    AgentInstance,
    ApprovalDecision,
    ChatMessage,
    LedgerEntry,
    PendingApproval,
    StreamSegment,
    Turn,
)
from agents_app.streaming import buffer
from tests.action_agents import PROBES, SETUP, ActionTestAgent, Setup, probe
from tests.support.events import names
from tests.support.frames import RESP, chat_request, chunks, is_done, receive_until, text_of, user_message

# The pause's and the ledger's events only (chat events and a call's action:* life are tested elsewhere).
pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.emitted(prefixes=("action:pause:", "action:ledger:"))]

PAUSED_MESSAGE = "This action is awaiting human approval. Stop and wait for the approval result before proceeding."
DESCRIPTOR = {"action": "pauseAction", "summary": "Approve pause action", "kind": "durable-pause", "risk": "high",
              "permissions": ["pause:run"]}
REMOVED = 'Action "pauseAction" is no longer registered, so the approved call cannot run. The approval was consumed.'

Messages = list[dict[str, Any]]


# --------------------------------------------------------------------------------------- helpers
@pytest.fixture(autouse=True)
def fresh_probes() -> Iterator[None]:
    SETUP.clear()
    PROBES.clear()
    yield
    SETUP.clear()
    PROBES.clear()


@pytest.fixture
def approver(make_user: Any) -> Any:
    return make_user("approver", is_staff=True)


def configure(name: str, **options: Any) -> Setup:
    SETUP[name] = Setup(**options)
    return SETUP[name]


def prompt(message: str) -> str:
    return "/tool pauseAction " + json.dumps({"message": message})


def paused(execution_id: str) -> dict[str, Any]:
    """What the model reads for a parked call, exactly: no descriptor, no permissions
    (docs/architecture.md#durable-pause)."""
    return {"status": "paused", "executionId": execution_id, "action": "pauseAction", "message": PAUSED_MESSAGE}


def not_pending(execution_id: str) -> dict[str, Any]:
    return {"status": "error", "executionId": execution_id,
            "error": f'Execution "{execution_id}" is no longer pending — it was approved or rejected elsewhere.'}


def tool_part(messages: Messages, tool_call_id: str = "demo_0_0") -> dict[str, Any]:
    return next(p for m in messages for p in m.get("parts", []) if p.get("toolCallId") == tool_call_id)


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


@dataclass(frozen=True)
class Parked:
    """One call of ``pauseAction`` that a turn parked."""

    agent: ActionTestAgent
    execution_id: str
    tool_call_id: str
    request_id: str

    async def messages(self) -> Messages:
        return await database_sync_to_async(transcript.load)(self.agent.instance)

    async def part(self) -> dict[str, Any]:
        """The call's tool part in the stored transcript."""
        return tool_part(await self.messages(), self.tool_call_id)

    async def approve(self, actor: Any = None) -> Any:
        return await approvals.approve_execution(self.execution_id, actor=actor)

    async def reject(self, reason: str | None = None, actor: Any = None) -> Any:
        return await approvals.reject_execution(self.execution_id, reason, actor=actor)


async def park(name: str, user: Any, message: str = "hello") -> Parked:
    """A programmatic turn of ``ActionTestAgent/name`` calls ``pauseAction``, which parks."""
    agent = await ActionTestAgent.aget(name, owner=user)
    before = {p["executionId"] for p in await agent.pending_approvals()}
    result = await agent.save_messages([prompt(message)])
    assert result.status == "completed", result
    [entry] = [p for p in await agent.pending_approvals() if p["executionId"] not in before]
    return Parked(agent, entry["executionId"], entry["descriptor"]["toolCallId"], result.request_id)


async def pending_ids() -> list[str]:
    return [pk async for pk in PendingApproval.objects.order_by("created_at").values_list("pk", flat=True)]


async def decision_of(execution_id: str) -> ApprovalDecision:
    return await ApprovalDecision.objects.select_related("decided_by").aget(execution_id=execution_id)


def interrupted_turn(instance: AgentInstance, partial: str) -> int:
    """A new user message whose turn was running in a process that no longer exists (kill -9).

    With ``partial`` the dead turn had streamed that much text of its reply (recovery persists
    it); without, it died before its first chunk. Returns the dead turn's pk.
    """
    transcript.save_message(instance, {"id": "u-prior", "role": "user",
                                       "parts": [{"type": "text", "text": "are you there?"}]})
    turn = Turn.objects.create(
        instance=instance, request_id="req-ap-prior", status=Turn.Status.RUNNING, started_at=timezone.now(),
        message_ids=["u-prior"], worker=f"{socket.gethostname()}:{2**22 + os.getpid()} specific.x!dead",
    )
    if partial:
        stream = buffer.start(turn, "m-partial")
        bodies = [{"type": "start", "messageId": "m-partial"}, {"type": "text-start", "id": "t"},
                  {"type": "text-delta", "id": "t", "delta": partial}]
        StreamSegment.objects.create(stream=stream, first_index=0, bodies=json.dumps([json.dumps(b) for b in bodies]))
    return turn.pk


# ------------------------------------------------------------------------- durable-pause actions
async def test_parks_for_approval_without_running_the_side_effect(user, emitted):
    call = await park("p1", user)
    assert re.fullmatch(r"actpause_[0-9a-f-]{36}", call.execution_id)
    assert (await call.part())["output"] == paused(call.execution_id)
    assert probe("p1").pause_count == 0
    row = await PendingApproval.objects.aget()
    assert (row.pk, row.action_name, row.tool_call_id, row.request_id, row.input) == (
        call.execution_id, "pauseAction", "demo_0_0", call.request_id, {"message": "hello"})
    assert (row.risk, row.summary, row.requested_by_id, row.descriptor["kind"]) == (
        "high", "Approve pause action", user.pk, "durable-pause")
    assert emitted == [(events.PAUSE_CREATED, {"action": "pauseAction", "executionId": call.execution_id,
                                               "toolCallId": "demo_0_0"})]


async def test_lists_the_parked_action_via_pending_approvals_with_its_descriptor(user):
    call = await park("p2", user, "hi")
    expected = [{"executionId": call.execution_id, "source": "action", "descriptor": {
        "requestId": call.request_id, "toolCallId": "demo_0_0", **DESCRIPTOR, "input": {"message": "hi"}}}]
    assert await call.agent.pending_approvals() == expected
    assert await call.agent.pending_approvals(call.execution_id) == expected
    assert await call.agent.pending_approvals("actpause_unknown") == []
    assert await database_sync_to_async(approvals.pending_approvals)() == expected


async def test_pending_approvals_are_oldest_first_and_filtered_by_instance(user):
    first = await park("p2a", user, "one")
    second = await park("p2b", user, "two")
    third = await park("p2a", user, "three")
    listed = await database_sync_to_async(approvals.pending_approvals)()
    assert [p["executionId"] for p in listed] == [first.execution_id, second.execution_id, third.execution_id]
    assert [p["descriptor"]["input"]["message"] for p in await first.agent.pending_approvals()] == ["one", "three"]
    by_instance = await database_sync_to_async(approvals.pending_approvals)(second.agent.instance)
    assert [p["executionId"] for p in by_instance] == [second.execution_id]


async def test_runs_the_action_exactly_once_on_approve_and_clears_the_pending_row(user, approver, emitted):
    call = await park("p3", user, "world")
    assert await call.approve(actor=approver) == "paused-exec: world"
    assert probe("p3").pause_count == 1
    assert await pending_ids() == []
    decision = await decision_of(call.execution_id)
    assert (decision.decision, decision.decided_by, decision.reason, decision.result, decision.action_name) == (
        "approved", approver, "", "paused-exec: world", "pauseAction")
    assert decision.instance_id == call.agent.instance.pk
    assert decision.descriptor["input"] == {"message": "world"}
    assert decision.requested_at <= decision.decided_at
    assert (await call.part())["output"] == "paused-exec: world"
    approved = (events.PAUSE_APPROVED, {"action": "pauseAction", "executionId": call.execution_id})
    assert approved in emitted
    assert names(emitted).index(events.PAUSE_CREATED) < emitted.index(approved)


async def test_rejects_without_running_the_action_and_clears_the_pending_row(user, approver, emitted):
    call = await park("p4", user)
    rejected = {"status": "rejected", "executionId": call.execution_id, "action": "pauseAction", "reason": "not now"}
    assert await call.reject("not now", actor=approver) == rejected
    assert probe("p4").pause_count == 0
    assert await pending_ids() == []
    decision = await decision_of(call.execution_id)
    assert (decision.decision, decision.decided_by, decision.reason, decision.result) == (
        "rejected", approver, "not now", rejected)
    assert (await call.part())["output"] == rejected
    assert (events.PAUSE_REJECTED, {"action": "pauseAction", "executionId": call.execution_id}) in emitted
    assert events.PAUSE_APPROVED not in names(emitted)
    # The continuation tells the model, which reads the rejection and says it in words.
    assert texts((await call.messages())[-1])[-1] == "Staff rejected pauseAction: not now."


async def test_a_rejection_without_a_reason_and_without_an_actor(user):
    call = await park("p4b", user)
    assert (await call.agent.reject_execution(call.execution_id))["reason"] == "Rejected by user"
    decision = await decision_of(call.execution_id)
    assert (decision.reason, decision.decided_by) == ("Rejected by user", None)


async def test_errors_on_a_second_approve_and_never_double_executes(user):
    call = await park("p5", user, "once")
    assert await call.approve() == "paused-exec: once"
    second = await call.approve()
    assert second == not_pending(call.execution_id)
    assert approvals.is_error(second)
    assert await call.reject("too late") == not_pending(call.execution_id)
    assert probe("p5").pause_count == 1
    assert await ApprovalDecision.objects.acount() == 1


async def test_errors_on_approve_after_reject(user):
    call = await park("p6", user)
    assert (await call.reject())["status"] == "rejected"
    assert await call.approve() == not_pending(call.execution_id)
    assert probe("p6").pause_count == 0
    assert (await decision_of(call.execution_id)).decision == "rejected"


async def test_picks_a_single_winner_under_concurrent_approves(user):
    call = await park("p7", user, "race")
    results = await asyncio.gather(call.approve(), call.approve())
    assert sorted(results, key=approvals.is_error) == ["paused-exec: race", not_pending(call.execution_id)]
    assert probe("p7").pause_count == 1
    assert await ApprovalDecision.objects.acount() == 1


async def test_picks_a_single_decision_when_approve_and_reject_race(user):
    call = await park("p7b", user, "race")
    approved, rejected = await asyncio.gather(call.approve(), call.reject("no"))
    assert [approvals.is_error(approved), approvals.is_error(rejected)].count(True) == 1
    decision = await decision_of(call.execution_id)
    assert probe("p7b").pause_count == (1 if decision.decision == "approved" else 0)
    assert (await call.part())["output"] == decision.result


async def test_runs_inline_without_parking_when_the_approval_predicate_returns_false(user, emitted):
    configure("p8", pause_approval=lambda input, ctx: input.message == "hello")
    agent = await ActionTestAgent.aget("p8", owner=user)
    assert (await agent.save_messages([prompt("other")])).status == "completed"
    messages = await database_sync_to_async(transcript.load)(agent.instance)
    assert tool_part(messages)["output"] == "paused-exec: other"
    assert "approvalDescriptor" not in tool_part(messages)
    assert probe("p8").pause_count == 1
    assert await pending_ids() == []
    assert events.PAUSE_CREATED not in names(emitted)


async def test_parks_when_the_approval_predicate_returns_true(user):
    configure("p9", pause_approval=lambda input, ctx: input.message == "hello")
    call = await park("p9", user, "hello")
    assert (await call.part())["output"] == paused(call.execution_id)
    assert probe("p9").pause_count == 0
    assert await pending_ids() == [call.execution_id]


async def test_returns_a_structured_error_when_the_action_was_removed_before_approve(user):
    call = await park("p10", user)
    SETUP["p10"].pause_removed = True
    result = await call.approve()
    assert result == {"status": "error", "executionId": call.execution_id, "action": "pauseAction", "error": REMOVED}
    assert approvals.is_error(result)
    assert probe("p10").pause_count == 0
    assert await pending_ids() == []  # the approval was consumed
    assert (await call.part())["output"] == result
    assert (await decision_of(call.execution_id)).result == result
    assert await call.approve() == not_pending(call.execution_id)


async def test_does_not_double_execute_across_a_duplicate_approve_when_idempotency_keyed(user, emitted):
    configure("p11", pause_key="dp-key")
    first = await park("p11", user, "keyed")
    assert await first.approve() == "paused-exec: keyed"
    second = await park("p11", user, "keyed")
    assert second.execution_id != first.execution_id
    assert await second.approve() == "paused-exec: keyed"
    assert probe("p11").pause_count == 1
    assert [(k, s) async for k, s in LedgerEntry.objects.values_list("key", "status")] == [
        ("action:pauseAction:dp-key", "settled")]
    assert names(emitted).count(events.LEDGER_REPLAYED) == 1
    assert (await second.part())["output"] == "paused-exec: keyed"


async def test_sweeps_abandoned_pending_rows_past_the_ttl_but_keeps_fresh_ones(user, emitted):
    old = await park("p12", user, "old")
    fresh = await park("p12", user, "fresh")
    # Two minutes pass for the first call only.
    await PendingApproval.objects.filter(pk=old.execution_id).aupdate(
        created_at=timezone.now() - timedelta(seconds=120))
    turns = await Turn.objects.acount()

    assert await database_sync_to_async(approvals.sweep_expired)(ttl=timedelta(seconds=60)) == 1
    assert await pending_ids() == [fresh.execution_id]
    expired = {"status": "error", "executionId": old.execution_id, "action": "pauseAction",
               "error": approvals.EXPIRED_REASON}
    decision = await decision_of(old.execution_id)
    assert (decision.decision, decision.decided_by, decision.reason, decision.result) == (
        "expired", None, approvals.EXPIRED_REASON, expired)
    # The model will read that the request expired; the fresh call still waits.
    assert (await old.part())["output"] == expired
    assert (await fresh.part())["output"] == paused(fresh.execution_id)
    assert emitted[-1] == (events.PAUSE_SWEPT, {"swept": 1})
    # Nobody decided anything: no continuation turn.
    assert await Turn.objects.acount() == turns
    assert await old.approve() == not_pending(old.execution_id)
    assert probe("p12").pause_count == 0


async def test_the_sweep_follows_the_ttl_setting_and_runs_from_celery_beat(user, emitted):
    call = await park("p13", user)
    sweep = database_sync_to_async(approvals.sweep_expired)
    assert await sweep(now=timezone.now() + timedelta(days=29)) == 0
    with override_settings(AGENT_ACTION_PENDING_APPROVAL_TTL=None):
        assert await sweep(now=timezone.now() + timedelta(days=365)) == 0
    assert events.PAUSE_SWEPT not in names(emitted)
    assert await pending_ids() == [call.execution_id]

    await PendingApproval.objects.aupdate(created_at=timezone.now() - timedelta(days=30, seconds=1))
    assert await database_sync_to_async(lambda: approval_tasks.sweep_pending_approvals.delay().get())() == {"swept": 1}
    assert await pending_ids() == []
    beat = settings.CELERY_BEAT_SCHEDULE["agents-sweep-pending-approvals"]
    assert beat["task"] == "agents_app.sweep_pending_approvals"


# --------------------------------------------------- durable-pause actions, turn-driven and connection-less
async def test_attaches_the_descriptor_to_the_paused_part_and_continues_with_no_open_connection(user):
    call = await park("dp1", user)
    part = await call.part()
    assert part["state"] == "output-available"
    assert part["approvalDescriptor"] == {"requestId": call.request_id, "toolCallId": "demo_0_0", **DESCRIPTOR,
                                          "input": {"message": "hello"}}
    # A sibling field: ``approval`` would make the client ask for an approval of a settled output.
    assert "approval" not in part
    assert part["output"] == paused(call.execution_id)
    assert (probe("dp1").pause_count, await pending_ids()) == (0, [call.execution_id])

    assert await call.approve() == "paused-exec: hello"
    assert probe("dp1").pause_count == 1
    messages = await call.messages()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert tool_part(messages)["output"] == "paused-exec: hello"
    assert tool_part(messages)["approvalDescriptor"] == part["approvalDescriptor"]
    assert texts(messages[-1])[-1] == "paused-exec: hello."
    assert [(t.kind, t.status) async for t in Turn.objects.order_by("pk")] == [
        ("programmatic", "completed"), ("continuation", "completed")]
    assert await pending_ids() == []


async def test_a_decision_is_concluded_once_however_often_its_conclusion_is_asked_for(user):
    """A worker that gets ``conclude_decision`` twice (at-least-once delivery) continues once."""
    call = await park("dp-once", user)
    assert await call.approve() == "paused-exec: hello"
    decision = await decision_of(call.execution_id)
    assert decision.concluded_at is not None
    assert await approvals.conclude(call.execution_id) is False
    assert await approvals.conclude("actpause_unknown") is False
    assert [(t.kind, t.status) async for t in Turn.objects.order_by("pk")] == [
        ("programmatic", "completed"), ("continuation", "completed")]


async def reject_compacted(name: str, user: Any) -> tuple[Parked, Any, Messages]:
    """Park a call, compact its tool part out of the transcript, reject it: (call, result, transcript)."""
    call = await park(name, user)

    def compact() -> None:
        reply = ChatMessage.objects.get(instance=call.agent.instance, role="assistant")
        parts = [p for p in reply.data["parts"] if p.get("toolCallId") != call.tool_call_id]
        reply.data = {**reply.data, "parts": parts}
        reply.save(update_fields=["data"])

    await database_sync_to_async(compact)()
    rejected = await call.reject("not now")
    return call, rejected, await call.messages()


def outcome_note(messages: Messages) -> str:
    [note] = [m for m in messages if m["role"] == "system"]
    [text] = texts(note)
    return text


async def test_labels_orphaned_durable_pause_outcomes_without_re_invoking_the_action(user):
    call, rejected, messages = await reject_compacted("dp2", user)
    assert rejected == {"status": "rejected", "executionId": call.execution_id, "action": "pauseAction",
                        "reason": "not now"}
    assert probe("dp2").pause_count == 0
    assert [m["role"] for m in messages] == ["user", "assistant", "system", "assistant"]
    assert re.fullmatch(rf"exec-outcome-{call.execution_id}-[0-9a-f-]{{36}}", messages[2]["id"])
    text = outcome_note(messages)
    assert text.startswith(f'[durable action] The paused execution "{call.execution_id}" was resolved')
    assert "[execute tool]" not in text
    # The model answers the note with words; it does not call the action again (a new parked call).
    assert texts(messages[3])
    assert [p["toolName"] for p in messages[3]["parts"] if p.get("toolCallId")] == []
    assert await pending_ids() == []


async def test_an_orphaned_outcome_reads_as_compact_json_like_every_tool_output(user):
    _, rejected, messages = await reject_compacted("dp3", user)
    text = outcome_note(messages)
    assert '"action":"pauseAction"' in text, text
    assert text.endswith(f"Outcome: {json.dumps(rejected, separators=(',', ':'))}")


async def test_a_connected_client_sees_the_outcome_and_then_the_continuation_stream(ws, user, approver):
    configure("live")
    await ActionTestAgent.aget("live", owner=user)
    a = await ws("/agents/action-test-agent/live")
    assert [(await a.receive_json_from())["type"] for _ in range(2)] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    await a.send_json_to(chat_request("r1", [user_message("u1", prompt("hello"))]))
    turn = await receive_until(a, is_done("r1"))
    [entry] = await database_sync_to_async(approvals.pending_approvals)()
    execution_id = entry["executionId"]
    [streamed] = [c for c in chunks(turn) if c["type"] == "tool-output-available"]
    assert streamed["output"] == paused(execution_id)
    assert streamed["approvalDescriptor"] == entry["descriptor"]

    assert await approvals.approve_execution(execution_id, actor=approver) == "paused-exec: hello"
    frames = await receive_until(a, lambda f: f.get("type") == RESP and f.get("done") is True)
    assert frames[0]["type"] == "cf_agent_message_updated"
    assert tool_part([frames[0]["message"]])["output"] == "paused-exec: hello"
    responses = [f for f in frames if f["type"] == RESP]
    assert responses and all(f.get("continuation") is True for f in responses)
    assert text_of(frames) == "paused-exec: hello."
    assert (await decision_of(execution_id)).decided_by == approver


async def test_an_approval_while_the_parking_turn_still_streams_waits_for_its_end(user):
    configure("slow")
    agent = await ActionTestAgent.aget("slow", owner=user)
    with override_settings(AGENT_DEMO_DELAY_MS=20):
        parking = asyncio.ensure_future(agent.save_messages([prompt("hello")]))
        while not (pending := await agent.pending_approvals()):
            await asyncio.sleep(0.005)
        # The model is still writing its words about the paused call.
        assert not parking.done()
        result = await agent.approve_execution(pending[0]["executionId"])
        assert (await parking).status == "completed"
    assert result == "paused-exec: hello"
    messages = await database_sync_to_async(transcript.load)(agent.instance)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    # The parking turn's end did not put the paused envelope back over the outcome.
    assert tool_part(messages)["output"] == "paused-exec: hello"
    said = texts(messages[-1])
    assert said[0] == "Asked staff to approve pauseAction."
    assert said[-1] == "paused-exec: hello."


async def test_an_agent_handle_decides_only_its_own_instances_calls(user):
    call = await park("mine", user)
    other = await ActionTestAgent.aget("theirs", owner=user)
    assert await other.pending_approvals() == []
    assert await other.approve_execution(call.execution_id) == not_pending(call.execution_id)
    assert await other.reject_execution(call.execution_id) == not_pending(call.execution_id)
    assert await pending_ids() == [call.execution_id]
    assert await call.agent.approve_execution(call.execution_id) == "paused-exec: hello"
    assert probe("mine").pause_count == 1


async def test_calls_parked_in_different_conversations_each_run_when_approved(user):
    """Tool call ids are unique within one conversation only: each conversation's calls are its own.

    (The demo model numbers calls per conversation, so every first call is ``demo_0_0``; a
    provider may do the same.) Approving one conversation's call must run it, whatever another
    conversation's call with the same id did.
    """
    calls = [await park("room-a", user, "hello"), await park("room-b", user, "hello"),
             await park("room-c", user, "other")]
    assert {call.tool_call_id for call in calls} == {"demo_0_0"}
    results = [await call.approve() for call in calls]
    assert [probe(name).pause_count for name in ("room-a", "room-b", "room-c")] == [1, 1, 1], results
    assert results == ["paused-exec: hello", "paused-exec: hello", "paused-exec: other"]


# ----------------------------------------------------- a durable pause during an active recovery incident
async def test_a_parked_durable_pause_is_not_a_pending_interaction(user):
    agent = await ActionTestAgent.aget("p64", owner=user)
    assert not await agent.has_pending_interaction()
    await park("p64", user)
    assert not await agent.has_pending_interaction()
    assert await agent.wait_until_stable(timeout=1) is True


@pytest.mark.parametrize("partial", ["", "Partial answer"], ids=["retry", "continue"])
async def test_recovering_an_interrupted_turn_leaves_a_parked_pause_approvable(user, partial):
    call = await park("rec", user, "world")
    dead = await database_sync_to_async(interrupted_turn)(call.agent.instance, partial)

    assert await turns.recover_interrupted() == 1
    assert (await Turn.objects.aget(pk=dead)).status == Turn.Status.ABORTED
    assert not await Turn.objects.filter(status__in=[Turn.Status.RUNNING, Turn.Status.QUEUED]).aexists()
    assert await pending_ids() == [call.execution_id]
    assert probe("rec").pause_count == 0
    assert (await call.part())["output"] == paused(call.execution_id)
    # One recovery attempt ran: it re-ran the request, or went on with the partial reply.
    attempt = await Turn.objects.aget(kind=Turn.Kind.RECOVERY)
    assert (attempt.status, attempt.continuation) == (Turn.Status.COMPLETED, bool(partial))
    if partial:
        last = (await call.messages())[-1]
        assert last["id"] == "m-partial"
        assert "".join(texts(last)).startswith(partial)

    assert await call.approve() == "paused-exec: world"
    assert probe("rec").pause_count == 1
    assert await pending_ids() == []
    assert (await call.part())["output"] == "paused-exec: world"


async def test_an_approval_does_not_wait_on_a_turn_whose_process_died(user):
    """A dead process's turn (not yet recovered by the sweep) must not hold up a decision.

    Deciding waits for a running turn of the instance to end, so that its end cannot overwrite
    the outcome; a turn of a dead process never ends by itself, it has to be recovered.
    """
    call = await park("dead", user, "world")
    await database_sync_to_async(interrupted_turn)(call.agent.instance, "Partial answer")
    try:
        async with asyncio.timeout(5):
            result = await call.approve()
    except TimeoutError:
        pytest.fail("approve_execution still waits, 5 s on, for the turn of a process that no longer exists")
    assert result == "paused-exec: world"
    assert probe("dead").pause_count == 1
    assert (await call.part())["output"] == "paused-exec: world"
