"""Durable-pause decisions: approve or reject a parked call, days later (docs/architecture.md#durable-pause).

A ``durable-pause`` action parks its call inside a turn (``actions.parking``); staff decide it
from the admin, the REST API, an ``rpc`` frame or Python code, and all of them call
``approve_execution`` / ``reject_execution`` here. Deciding is *claim by delete*: exactly one of
any number of concurrent deciders wins; the others get the "no longer pending" error object (never
an exception, never a second run). The winner runs the action through the ledgered pipeline, then
the decision is *concluded*: the outcome goes into the parked tool part, clients are told, and a
continuation turn follows, on a Celery worker (so an admin or API request never waits for a turn)
or in the deciding call (``AGENT_APPROVAL_CONTINUATION``).
"""

import asyncio
import contextlib
import json
import uuid
from datetime import datetime, timedelta
from typing import Any, Final

from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async
from django.db import transaction
from django.utils import timezone

from .. import conf, dispatch, events, registry, transcript, turns, waits
from ..actions.ledger import USE_SETTING, UseSetting
from ..actions.parking import EXECUTION_PREFIX
from ..actions.pipeline import run_approved_pause
from ..agent import ChatAgent
from ..errors import AgentConfigurationError, UnknownAgent
from ..messages import UIMessage, is_tool_part
from ..models import AgentInstance, ApprovalDecision, ChatMessage, PendingApproval, Turn
from ..protocol import frames
from ..recovery import liveness
from ..streaming import fanout
from ..turns import control

__all__ = [
    "EXECUTION_PREFIX",
    "approve_execution",
    "can_approve",
    "conclude",
    "is_error",
    "pending_approvals",
    "reject_execution",
    "sweep_expired",
]

DEFAULT_REJECTION_REASON: Final = "Rejected by user"
EXPIRED_REASON: Final = "The approval request expired before anyone decided it."
# Id prefix of the system note written when the parked tool part is gone (compacted away).
OUTCOME_NOTE_PREFIX: Final = "exec-outcome-"
# Id prefix of the system note that names the decided call when later messages follow its own.
CONTINUATION_NOTE_PREFIX: Final = "exec-continues-"
# The outcome JSON in that note is cut to this many characters.
OUTCOME_SUMMARY_MAX_CHARS: Final = 4_000
# How long a conclusion waits for a running turn of the instance to end (seconds): the parking
# turn may still be streaming when an approval comes, and its end would overwrite the part.
SETTLE_TIMEOUT_SECONDS: Final = 60.0
_POLL_SECONDS: Final = 0.05


def can_approve(user: Any) -> bool:
    """Whether ``user`` may see and decide parked calls: ``agents_app.approve_action`` (or superuser)."""
    return bool(user is not None and user.is_active and user.has_perm("agents_app.approve_action"))


def is_error(outcome: Any) -> bool:
    """Whether an ``approve_execution`` / ``reject_execution`` result is the error object."""
    return isinstance(outcome, dict) and outcome.get("status") == "error" and "executionId" in outcome


def _not_pending(execution_id: str) -> dict[str, Any]:
    return {
        "status": "error", "executionId": execution_id,
        "error": f'Execution "{execution_id}" is no longer pending — it was approved or rejected elsewhere.',
    }


def pending_approvals(instance: AgentInstance | None = None, execution_id: str | None = None) -> list[dict[str, Any]]:
    """Parked calls, oldest first: ``[{"executionId", "source": "action", "descriptor"}]``."""
    rows = PendingApproval.objects.order_by("created_at", "execution_id")
    if instance is not None:
        rows = rows.filter(instance=instance)
    if execution_id is not None:
        rows = rows.filter(pk=execution_id)
    return [
        {"executionId": pk, "source": "action", "descriptor": descriptor}
        for pk, descriptor in rows.values_list("execution_id", "descriptor")
        if isinstance(descriptor, dict)
    ]


# ---------------------------------------------------------------------------------------- decide
def _claim(execution_id: str, decision: str, reason: str, actor: Any,
           instance: AgentInstance | None) -> PendingApproval | None:
    """Delete the row and record the decision in one transaction; None if someone else got it first.

    The DELETE's row count settles a race: concurrent deciders block on the row and all but
    one delete nothing (claim by delete).
    """
    with transaction.atomic():
        rows = PendingApproval.objects.select_related("instance").filter(pk=execution_id)
        if instance is not None:
            rows = rows.filter(instance=instance)
        row = rows.first()
        if row is None or PendingApproval.objects.filter(pk=execution_id).delete()[0] != 1:
            return None
        ApprovalDecision.objects.create(
            execution_id=execution_id, instance=row.instance, action_name=row.action_name, decision=decision,
            reason=reason, descriptor=row.descriptor, decided_by=_user(actor), requested_at=row.created_at,
            decided_at=timezone.now(),
        )
    return row


def _user(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None


async def approve_execution(execution_id: str, *, actor: Any = None, instance: AgentInstance | None = None) -> Any:
    """Run a parked call exactly once and continue the conversation; never raises.

    Returns what the model is told: the action's output (or its error envelope), or the error
    object ``{"status": "error", "executionId", "error"}`` when the call is no longer pending
    (decided elsewhere, expired, or not of ``instance``) or its action is gone from the code.
    """
    row = await database_sync_to_async(_claim)(execution_id, ApprovalDecision.Decision.APPROVED, "", actor, instance)
    if row is None:
        return _not_pending(execution_id)
    agent = _agent(row.instance)
    try:
        action = (await sync_to_async(agent.compiled_actions)()).get(row.action_name) if agent is not None else None
        problem = None
    except AgentConfigurationError as exc:  # the agent's get_actions() broke since it parked
        action, problem = None, str(exc)
    if agent is None or action is None:
        output: Any = {
            "status": "error", "executionId": execution_id, "action": row.action_name,
            "error": problem or f'Action "{row.action_name}" is no longer registered, so the approved call cannot '
                                "run. The approval was consumed.",
        }
    else:
        _resolved(row, approved=True)
        output = await run_approved_pause(agent, action, row)
        events.emit(events.PAUSE_APPROVED, action=row.action_name, executionId=execution_id)
    await _decided(row, output)
    return output


async def reject_execution(execution_id: str, reason: str | None = None, *, actor: Any = None,
                           instance: AgentInstance | None = None) -> Any:
    """Refuse a parked call (it never runs) and continue the conversation; never raises."""
    reason = reason or DEFAULT_REJECTION_REASON
    row = await database_sync_to_async(_claim)(execution_id, ApprovalDecision.Decision.REJECTED, reason, actor,
                                               instance)
    if row is None:
        return _not_pending(execution_id)
    output = {"status": "rejected", "executionId": execution_id, "action": row.action_name, "reason": reason}
    events.emit(events.PAUSE_REJECTED, action=row.action_name, executionId=execution_id)
    _resolved(row, approved=False)
    await _decided(row, output)
    return output


def _resolved(row: PendingApproval, *, approved: bool) -> None:
    """``action:approval-resolved`` for a parked call staff decided (docs/architecture.md#action-events)."""
    events.emit(events.ACTION_APPROVAL_RESOLVED, action=row.action_name, requestId=row.request_id,
                toolCallId=row.tool_call_id, approved=approved)


def _agent(instance: AgentInstance) -> ChatAgent | None:
    try:
        return registry.agent_for(instance)
    except UnknownAgent:
        return None


async def _decided(row: PendingApproval, output: Any) -> None:
    """Record what the model is told, then conclude the decision where the setting says."""
    await ApprovalDecision.objects.filter(execution_id=row.execution_id).aupdate(result=output)
    if conf.get("AGENT_APPROVAL_CONTINUATION") == "inline":
        async with control.scoped():
            await conclude(row.execution_id)
    else:
        await dispatch.enqueue(dispatch.CONCLUDE_DECISION, row.execution_id)


# -------------------------------------------------------------------------------------- conclude
async def conclude(execution_id: str) -> bool:
    """Put a decision's outcome where the model will read it and run the model's reaction.

    Exactly one call per decision does it (the ``concluded_at`` claim), so a task delivered
    twice never continues the conversation twice. Waits (bounded) until no turn of the instance
    runs: the parked part must be stored first. False when there was nothing to conclude.
    """
    decision = await database_sync_to_async(_claim_conclusion)(execution_id)
    if decision is None or decision.instance is None:
        return False
    instance = decision.instance
    await _settled(instance)
    message = await database_sync_to_async(_record_outcome)(instance, execution_id, decision.result)
    if message is not None:
        await fanout.publish(instance.pk, frames.message_updated(message))
        await database_sync_to_async(_point_to_the_call)(instance, message, decision)
    if await database_sync_to_async(turns.enqueue_continuation)(instance) is not None:
        await turns.drain(instance.pk)
    return True


def _claim_conclusion(execution_id: str) -> ApprovalDecision | None:
    won = ApprovalDecision.objects.filter(execution_id=execution_id, concluded_at__isnull=True).update(
        concluded_at=timezone.now()
    )
    return ApprovalDecision.objects.select_related("instance").get(execution_id=execution_id) if won else None


async def _settled(instance: AgentInstance) -> None:
    """Wait (bounded) until no turn of the instance runs: the parked part must be stored first.

    A running turn whose process died is cut and recovered here rather than waited for: the
    recovery sweep might be seconds away. (Its parked part was stored when it parked.)
    """
    running = Turn.objects.of(instance).running()
    with contextlib.suppress(TimeoutError), waits.watching([instance.pk]) as watch:
        async with asyncio.timeout(SETTLE_TIMEOUT_SECONDS):
            while (turn := await running.afirst()) is not None:
                if not liveness.is_alive(turn):
                    await turns.recover_turn(turn)
                    return
                await watch.apause(_POLL_SECONDS)


def _record_outcome(instance: AgentInstance, execution_id: str, output: Any) -> UIMessage | None:
    """Replace the parked part's output; returns the updated message (None if none was updated).

    When the part is gone (the transcript was compacted or edited), a system note tells the
    model the outcome instead, unless a settled part already carries it.
    """
    agent = _agent(instance)
    policy = transcript.Policy.of(agent) if agent is not None else transcript.DEFAULT_POLICY
    message = transcript.update_tool_part(
        instance, lambda part: _parked_here(part, execution_id),
        lambda part: {**part, "state": "output-available", "output": output}, policy=policy,
    )
    if message is not None:
        return message
    if any(_mentions(part, execution_id) for message in transcript.load(instance) for part in message["parts"]):
        return None
    summary = json.dumps(output, ensure_ascii=False, separators=(",", ":"))[:OUTCOME_SUMMARY_MAX_CHARS]
    transcript.save_message(instance, {
        "id": f"{OUTCOME_NOTE_PREFIX}{execution_id}-{uuid.uuid4()}", "role": "system",
        "parts": [{"type": "text", "text": (
            f'[durable action] The paused execution "{execution_id}" was resolved, but its tool call is no '
            f"longer in the transcript (it may have been compacted). Outcome: {summary}"
        )}],
        "metadata": {"continuationOf": {"executionId": execution_id}},
    }, policy=policy)
    return None


def _point_to_the_call(instance: AgentInstance, message: UIMessage, decision: ApprovalDecision) -> None:
    """When a later message follows the one that holds the decided call, say which call the
    continuation is about: a system note after the latest message, naming the call.

    The continuation goes on in the last message only when the call is in it; otherwise it is a
    reply of its own after the note, marked with the note's ``continuationOf`` (``turns.engine``),
    and the model reads which call it answers. Without the note the model would go on from the
    latest reply, about that reply's calls.
    """
    last = ChatMessage.objects.filter(instance=instance).order_by("-position").values_list(
        "message_id", flat=True).first()
    tool_call_id = (decision.descriptor or {}).get("toolCallId")
    if last is None or last == message["id"] or not tool_call_id:
        return
    agent = _agent(instance)
    transcript.save_message(instance, {
        "id": f"{CONTINUATION_NOTE_PREFIX}{decision.execution_id}", "role": "system",
        "parts": [{"type": "text", "text": (
            f'[durable action] Staff {decision.decision} the paused call {tool_call_id} of {decision.action_name} '
            f'(execution "{decision.execution_id}") after later messages; its outcome is now that call\'s result, '
            "above. Tell the user what came of it."
        )}],
        "metadata": {"continuationOf": {"toolCallId": tool_call_id, "executionId": decision.execution_id}},
    }, policy=transcript.Policy.of(agent) if agent is not None else transcript.DEFAULT_POLICY)


def _parked_here(part: dict[str, Any], execution_id: str) -> bool:
    output = part.get("output")
    return _mentions(part, execution_id) and output.get("status") == "paused"


def _mentions(part: dict[str, Any], execution_id: str) -> bool:
    output = part.get("output")
    return is_tool_part(part) and isinstance(output, dict) and output.get("executionId") == execution_id


# ----------------------------------------------------------------------------------------- sweep
def sweep_expired(*, now: datetime | None = None,
                  ttl: timedelta | UseSetting | None = USE_SETTING, batch_size: int = 500) -> int:
    """Remove parked calls older than ``AGENT_ACTION_PENDING_APPROVAL_TTL``, oldest first.

    Each one is recorded as ``expired`` (and concluded at once) and its part tells the model the
    request expired; continuations are left to the next conversation turn (nobody decided
    anything). Returns how many were removed; emits ``action:pause:swept`` when any were.
    """
    limit = conf.get("AGENT_ACTION_PENDING_APPROVAL_TTL") if ttl is USE_SETTING else ttl
    if limit is None:
        return 0
    cutoff = (now or timezone.now()) - limit
    expired = list(PendingApproval.objects.filter(created_at__lt=cutoff).order_by("created_at")
                   .values_list("execution_id", flat=True)[:batch_size])
    swept = 0
    for execution_id in expired:
        row = _claim(execution_id, ApprovalDecision.Decision.EXPIRED, EXPIRED_REASON, None, None)
        if row is None:
            continue
        output = {"status": "error", "executionId": execution_id, "action": row.action_name, "error": EXPIRED_REASON}
        ApprovalDecision.objects.filter(execution_id=execution_id).update(result=output, concluded_at=timezone.now())
        message = _record_outcome(row.instance, execution_id, output)
        if message is not None:
            async_to_sync(fanout.publish)(row.instance.pk, frames.message_updated(message))
        swept += 1
    if swept:
        events.emit(events.PAUSE_SWEPT, swept=swept)
    return swept
