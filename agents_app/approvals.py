"""Durable-pause approvals: park a risky call in the database, decide it days later (spec §5.10).

A ``durable-pause`` action does not wait on a socket. Its call is *parked*: a ``PendingApproval``
row holds the input and the descriptor, the model is told the call awaits approval, and the turn
ends. Later, staff approve or reject it from the admin, the REST API, or Python code; every one
of those calls ``approve_execution`` / ``reject_execution`` here.

Deciding is *claim by delete*: the decider deletes the row and records the ``ApprovalDecision`` in
one transaction, so of any number of concurrent deciders, on any process, exactly one wins; the
others get the "no longer pending" error object (never an exception, never a second run).
The winner runs the action through the ledgered pipeline (timeout included, authorization as at
park time), writes the outcome into the parked tool part, tells connected clients, and queues a
continuation turn so the model reacts even when nobody is connected.
"""

import asyncio
import contextlib
import json
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async
from django.db import transaction
from django.utils import timezone

from . import conf, events, registry, transcript
from .actions.descriptor import approval_descriptor
from .errors import AgentConfigurationError, UnknownAgent
from .ledger import USE_SETTING, UseSetting
from .messages import is_tool_part
from .models import AgentInstance, ApprovalDecision, PendingApproval, Turn
from .protocol import frames
from .streaming import fanout

if TYPE_CHECKING:
    from .actions.context import ActionContext
    from .actions.descriptor import Action
    from .agent import ChatAgent

__all__ = [
    "EXECUTION_PREFIX",
    "approve_execution",
    "can_approve",
    "is_error",
    "park",
    "pending_approvals",
    "reject_execution",
    "sweep_expired",
]

# Prefix of every execution id (spec §5.14).
EXECUTION_PREFIX: Final = "actpause_"
# What the model reads in place of the output of a parked call (spec §5.10, exact string).
PAUSED_MESSAGE: Final = (
    "This action is awaiting human approval. Stop and wait for the approval result before proceeding."
)
DEFAULT_REJECTION_REASON: Final = "Rejected by user"
EXPIRED_REASON: Final = "The approval request expired before anyone decided it."
# Id prefix of the system note written when the parked tool part is gone (compacted away).
OUTCOME_NOTE_PREFIX: Final = "exec-outcome-"
# The outcome JSON in that note is cut to this many characters.
OUTCOME_SUMMARY_MAX_CHARS: Final = 4_000
# How long an outcome waits for a running turn of the instance to end (seconds): the parking
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


def _paused(execution_id: str, action_name: str) -> dict[str, Any]:
    return {"status": "paused", "executionId": execution_id, "action": action_name, "message": PAUSED_MESSAGE}


# ------------------------------------------------------------------------------------------ park
async def park(agent: "ChatAgent", action: "Action[Any]", input: Any, ctx: "ActionContext",
               permissions: list[str]) -> dict[str, Any]:
    """Park one call of a durable-pause action (authorized already); returns the paused envelope."""
    assert action.name is not None
    execution_id = EXECUTION_PREFIX + str(uuid.uuid4())
    descriptor = approval_descriptor(action, request_id=ctx.request_id, tool_call_id=ctx.tool_call_id,
                                     input=input, permissions=permissions)
    await PendingApproval.objects.acreate(
        execution_id=execution_id, instance_id=agent.instance.pk, agent=agent.instance.slug, action_name=action.name,
        tool_call_id=ctx.tool_call_id, request_id=ctx.request_id, input=descriptor["input"], descriptor=descriptor,
        risk=descriptor.get("risk", ""), summary=descriptor["summary"],
        # Who asked: the turn's user, else (a programmatic turn) the owner of the conversation.
        requested_by_id=getattr(agent.user, "pk", None) or agent.instance.owner_id, created_at=timezone.now(),
    )
    events.emit(events.PAUSE_CREATED, action=action.name, executionId=execution_id, toolCallId=ctx.tool_call_id)
    agent.parked_descriptors[ctx.tool_call_id] = descriptor
    return _paused(execution_id, action.name)


def pending_approvals(instance: AgentInstance | None = None, execution_id: str | None = None) -> list[dict[str, Any]]:
    """Parked calls, oldest first: ``[{"executionId", "source": "action", "descriptor"}]`` (spec §5.10)."""
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
    one delete nothing (spec §5.10 "claim-by-delete").
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
        from .actions.pipeline import run_approved_pause

        output = await run_approved_pause(agent, action, row)
        events.emit(events.PAUSE_APPROVED, action=row.action_name, executionId=execution_id)
    await _conclude(row, output)
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
    await _conclude(row, output)
    return output


def _agent(instance: AgentInstance) -> "ChatAgent | None":
    try:
        return registry.get_agent_class(instance.slug)(instance)
    except UnknownAgent:
        return None


async def _conclude(row: PendingApproval, output: Any) -> None:
    """Record the result, put it where the model will read it, and queue the model's reaction."""
    await ApprovalDecision.objects.filter(execution_id=row.execution_id).aupdate(result=output)
    await _settled(row.instance)
    message = await database_sync_to_async(_apply_outcome)(row.instance, row.execution_id, row.action_name, output)
    if message is not None:
        await fanout.publish(row.instance.pk, frames.message_updated(message))
    await continue_conversation(row.instance)


async def _settled(instance: AgentInstance) -> None:
    """Wait (bounded) until no turn of the instance runs: the parked part must be stored first.

    A running turn whose process died is finalised here (its reply saved from the stream
    buffer) rather than waited for: the recovery sweep might be a minute away.
    """
    from .recovery import recover
    from .turns.lock import is_orphaned

    running = Turn.objects.filter(instance=instance, status=Turn.Status.RUNNING)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(SETTLE_TIMEOUT_SECONDS):
            while (turn := await running.afirst()) is not None:
                if is_orphaned(turn):
                    await recover(turn)
                    return
                await asyncio.sleep(_POLL_SECONDS)


def _apply_outcome(instance: AgentInstance, execution_id: str, action_name: str,
                   output: Any) -> dict[str, Any] | None:
    """Replace the parked part's output; returns the updated message (None if none was updated).

    When the part is gone (the transcript was compacted or edited), a system note tells the
    model the outcome instead, unless a settled part already carries it (spec §5.10).
    """
    message = transcript.update_tool_part(
        instance, lambda part: _parked_here(part, execution_id),
        lambda part: {**part, "state": "output-available", "output": output},
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
    })
    return None


def _parked_here(part: dict[str, Any], execution_id: str) -> bool:
    output = part.get("output")
    return _mentions(part, execution_id) and output.get("status") == "paused"


def _mentions(part: dict[str, Any], execution_id: str) -> bool:
    output = part.get("output")
    return is_tool_part(part) and isinstance(output, dict) and output.get("executionId") == execution_id


async def continue_conversation(instance: AgentInstance) -> None:
    """Queue a turn in which the model reacts to the outcome, and have it run (spec §5.10).

    ``AGENT_APPROVAL_CONTINUATION`` says where: ``"celery"`` (default) hands it to a worker, so
    it runs with nobody connected and whatever process made the decision (an admin request, an
    API call); ``"inline"`` runs it here before returning (single-process setups and tests).
    Connected clients see it stream either way, through the instance's group.
    """
    from .turns.interactions import enqueue_continuation

    if await database_sync_to_async(enqueue_continuation)(instance) is None:
        return
    if conf.get("AGENT_APPROVAL_CONTINUATION") == "inline":
        from .turns import control, drain

        async with control.scoped():
            await drain(instance.pk)
    else:
        from .tasks import drain_instance

        await sync_to_async(drain_instance.delay)(instance.pk)


# ----------------------------------------------------------------------------------------- sweep
def sweep_expired(*, now: datetime | None = None,
                  ttl: timedelta | UseSetting | None = USE_SETTING, batch_size: int = 500) -> int:
    """Remove parked calls older than ``AGENT_ACTION_PENDING_APPROVAL_TTL``, oldest first (spec §5.10).

    Each one is recorded as ``expired`` and its part tells the model the request expired;
    continuations are left to the next conversation turn (nobody decided anything). Returns
    how many were removed; emits ``action:pause:swept`` when any were.
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
        ApprovalDecision.objects.filter(execution_id=execution_id).update(result=output)
        message = _apply_outcome(row.instance, execution_id, row.action_name, output)
        if message is not None:
            async_to_sync(fanout.publish)(row.instance.pk, frames.message_updated(message))
        swept += 1
    if swept:
        events.emit(events.PAUSE_SWEPT, swept=swept)
    return swept
