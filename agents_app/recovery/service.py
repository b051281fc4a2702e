"""Durable chat recovery: a turn cut by a crash or a stalled stream carries on by itself.

Two steps, each safe on any process (docs/architecture.md#crash-recovery). **Cut** (``cut``): a
running turn whose process is gone (``liveness``) is aborted by one conditional UPDATE, so exactly
one noticer wins; the same transaction closes its stream, opens (or continues) and charges its
incident, and queues a recovery attempt ahead of everything. **Attempt** (``begin_attempt``, when
the engine claims it): the partial is rebuilt from the stored chunks, the budget checked,
``on_chat_recovery`` asked, the partial stored and its interrupted tool calls repaired; it then
streams as a *retry* or a *continuation*. A turn waiting on the user is parked, not retried; a
later cut of it starts a fresh budget.
"""

import asyncio
import inspect
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction
from django.utils import timezone

from .. import events, registry, transcript
from ..actions import ledger
from ..actions.envelopes import pending_error
from ..agent import ChatAgent
from ..errors import UnknownAgent
from ..messages import MessageBuilder, UIMessage, clone, is_tool_part, new_request_id
from ..models import AgentInstance, RecoveryIncident, StreamRecord, StreamSegment, Turn
from ..protocol import frames
from ..protocol.types import Outcome
from ..streaming import buffer, fanout
from ..streaming.items import Item
from . import liveness, memory
from . import policy as chat_recovery
from .policy import (
    ChatRecovery,
    ChatRecoveryContext,
    ChatRecoveryExhaustedContext,
    ChatRecoveryProgressContext,
    Kind,
    Reason,
    Status,
)

logger = logging.getLogger("agents_app.turns")

INTERRUPTED = "Interrupted: the process running this turn stopped"
# The same, when the platform says its process was killed for lack of memory (``memory``).
OUT_OF_MEMORY = "Interrupted: the process running this turn was killed for lack of memory"
STALLED = "Interrupted: the model stream stalled"
# What a server tool call cut mid-way answers (the model sees it and may call again).
INTERRUPTED_TOOL_CALL = "The tool call was interrupted before it finished"
# Why an incident was skipped: the turn waits on the user; the agent said ``continue: False``.
AWAITING_INTERACTION = "awaiting_interaction"
CONTINUE_DISABLED = "continue_disabled"
# Queue priority of recovery attempts (``Turn.priority``): they run before anything queued.
RECOVERY_PRIORITY = 1
# Finished incidents stay this long for the admin (``sweep_expired``).
INCIDENT_RETENTION = timedelta(days=7)


# --- 1. the cut ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cut:
    """A turn whose process died (or whose stream stalled), as the cut left it."""

    turn: Turn
    # The recovery attempt queued for it; None when there is nothing to recover (a clear or a
    # cancel came first: the partial reply was stored as it stands).
    attempt: Turn | None
    root_request_id: str
    # Index of the last chunk stored for it (-1: none), so clients that lost live chunks resync.
    last_seq: int


def cut(turn_pk: int, reason: str = INTERRUPTED) -> Cut | None:
    """Abort a running turn whose process is gone and queue its recovery; None if another process did."""
    with transaction.atomic():
        won = Turn.objects.filter(pk=turn_pk).running().update(
            status=Turn.Status.ABORTED, error=reason, finished_at=timezone.now()
        )
        if not won:
            return None
        # With its instance, which ``announce`` names in its events without a query of its own.
        return schedule(Turn.objects.select_related("incident", "instance").get(pk=turn_pk))


def schedule(turn: Turn) -> Cut:
    """Close the stream of a turn that was just cut and queue a recovery attempt for it.

    Runs inside the caller's transaction (``cut``, or the engine ending a stalled turn).
    """
    stream = StreamRecord.objects.filter(turn=turn).first()
    last_seq = -1
    if stream is not None:
        StreamRecord.objects.filter(pk=stream.pk, status=StreamRecord.Status.STREAMING).update(
            status=StreamRecord.Status.COMPLETED, completed_at=timezone.now()
        )
        last_seq = _last_stored_index(stream)
    root = turn.incident.root_request_id if turn.kind == Turn.Kind.RECOVERY and turn.incident else turn.request_id
    cleared = AgentInstance.objects.generation_of(turn.instance_id) > turn.generation
    cancelled = Turn.objects.filter(pk=turn.pk, cancel_requested=True).exists()
    # A save_messages(fn) turn cut before its function ran: the function died with its process.
    lost_request = turn.pending_messages and turn.messages_to_store is None
    if cleared or cancelled or lost_request:
        if cancelled and stream is not None:
            _store_as_is(turn, stream)
        return Cut(turn, None, root, last_seq)
    out_of_memory = _killed_by_oom(turn)
    if out_of_memory:
        Turn.objects.filter(pk=turn.pk).update(error=OUT_OF_MEMORY)
        turn.error = OUT_OF_MEMORY
    incident = _open_incident(turn, root, _produced(stream) if stream is not None else 0, out_of_memory)
    Turn.objects.filter(pk=turn.pk).update(incident=incident)
    attempt = Turn.objects.create(
        instance_id=turn.instance_id, request_id=new_request_id(), kind=Turn.Kind.RECOVERY,
        priority=RECOVERY_PRIORITY, generation=turn.generation, body=turn.body, client_tools=turn.client_tools,
        message_ids=turn.message_ids, user_id=turn.user_id, incident=incident, recovers=turn,
        recovery_data=turn.recovery_data,
        # Cut before its messages were stored: the attempt stores them first.
        pending_messages=turn.pending_messages, messages_to_store=turn.messages_to_store,
    )
    return Cut(turn, attempt, root, last_seq)


def _last_stored_index(stream: StreamRecord) -> int:
    segment = StreamSegment.objects.filter(stream=stream).order_by("-first_index").only(
        "first_index", "bodies").first()
    return -1 if segment is None else segment.first_index + len(json.loads(segment.bodies)) - 1


def _killed_by_oom(turn: Turn) -> bool:
    """Whether the turn's process is gone and the OOM killer took it (docs/architecture.md#out-of-memory)."""
    return (turn.error == INTERRUPTED and not liveness.process_exists(turn.worker)
            and memory.killed_by_oom(turn.memory_watch))


def _open_incident(turn: Turn, root: str, produced: int, out_of_memory: bool = False) -> RecoveryIncident:
    """The incident of a cut turn (an attempt's own, or the one its request and user message
    name), charged for the cut: every cut is an attempt, even one that died before it began."""
    now = timezone.now()
    started = turn.started_at or turn.created_at or now
    if turn.kind == Turn.Kind.RECOVERY and turn.incident is not None:
        incident = turn.incident
    else:
        latest_user = turn.message_ids[-1] if turn.message_ids else ""
        incident, created = RecoveryIncident.objects.get_or_create(
            instance_id=turn.instance_id, incident_id=chat_recovery.incident_id(root, latest_user),
            defaults={"root_request_id": root, "last_progress_at": started},
        )
        if not created and not incident.is_open:
            # The same request cut again after its incident ended: a fresh budget.
            incident.attempt, incident.reason, incident.error, incident.finished_at = 0, "", "", None
            incident.oom_attempts = 0
    spent = None if incident.attempt == 0 else _budget(incident)
    budget = chat_recovery.charge(spent, produced, now=now, started_at=started, out_of_memory=out_of_memory)
    incident.attempt, incident.work, incident.last_progress_at = budget.attempt, budget.work, budget.last_progress_at
    incident.oom_attempts = budget.oom_attempts
    incident.attempts_total += 1
    incident.status = Status.SCHEDULED
    incident.save()
    return incident


def _budget(incident: RecoveryIncident) -> chat_recovery.Budget:
    return chat_recovery.Budget(attempt=incident.attempt, work=incident.work,
                                last_progress_at=incident.last_progress_at, oom_attempts=incident.oom_attempts)


def _produced(stream: StreamRecord) -> int:
    """Content chunks a cut turn stored: its progress (``chat_recovery.is_content``)."""
    return sum(chat_recovery.is_content(json.loads(body)) for _, body in buffer.read(stream))


def _store_as_is(turn: Turn, stream: StreamRecord) -> None:
    """A cancelled turn that died: its partial reply is stored as the cancel would have."""
    partial = _partial(stream, transcript.load(turn.instance_id))
    if partial.has_content():
        instance = AgentInstance.objects.get(pk=turn.instance_id)
        transcript.save_message(instance, partial.message, after=_request_of(turn), policy=_policy(instance))


async def recover(turn: Turn, reason: str = INTERRUPTED) -> Cut | None:
    """Cut ``turn`` (its process is gone) and tell every connection; None if another process won.

    The caller runs the queued attempt (``turns.run_recovery``).
    """
    won = await database_sync_to_async(cut)(turn.pk, reason)
    if won is not None:
        await announce(won)
    return won


async def announce(won: Cut) -> None:
    """The cut turn's terminal frame, then "recovering" to every connection of the instance."""
    turn = won.turn
    outcome = Outcome.RECOVERING if won.attempt is not None else Outcome.ABORTED
    terminal = frames.done(request_id=turn.request_id, outcome=outcome, message_ids=turn.message_ids,
                           continuation=turn.continuation)
    await fanout.publish_item(turn.instance_id, Item.frame(terminal, request_id=turn.request_id,
                                                           last_seq=won.last_seq))
    if won.attempt is None:
        await fanout.publish(turn.instance_id, frames.chat_messages(
            await database_sync_to_async(transcript.load)(turn.instance_id)))
        return
    await fanout.publish(turn.instance_id, frames.chat_recovering(recovering=True, request_id=won.root_request_id))
    instance = turn.instance  # read with the turn (``cut``)
    data = {"requestId": turn.request_id, "recoveryRootRequestId": won.root_request_id,
            "incidentId": won.attempt.incident.incident_id if won.attempt.incident else "", "reason": turn.error}
    events.emit_chat(instance, events.RECOVERY_DETECTED, **data)
    events.emit_chat(instance, events.RECOVERY_SCHEDULED, attemptRequestId=won.attempt.request_id, **data)


async def recover_stream(stream_pk: int) -> Cut | None:
    """A stream whose writer is gone (found by a reconnecting client): cut its turn."""
    turn = await Turn.objects.filter(stream__pk=stream_pk).afirst()
    if turn is None or turn.status != Turn.Status.RUNNING:
        await StreamRecord.objects.filter(pk=stream_pk, status=StreamRecord.Status.STREAMING).aupdate(
            status=StreamRecord.Status.COMPLETED, completed_at=timezone.now())
        return None
    return await recover(turn)


# A queued recovery attempt that nobody has claimed for this long is run by the next sweep (the
# process that was to run it may have died first).
UNCLAIMED_ATTEMPT = timedelta(seconds=5)


def unclaimed_attempts(now: datetime) -> list[int]:
    """Instances whose recovery attempt has waited in the queue for ``UNCLAIMED_ATTEMPT``."""
    return list(Turn.objects.queued().filter(kind=Turn.Kind.RECOVERY, created_at__lt=now - UNCLAIMED_ATTEMPT)
                .values_list("instance_id", flat=True).distinct())


def interrupted(now: datetime) -> list[Turn]:
    """Running turns whose process is gone."""
    return [turn for turn in Turn.objects.running() if not liveness.is_alive(turn, now)]


async def recover_interrupted(*, now: datetime | None = None) -> list[Cut]:
    """Cut every running turn whose process is gone; the cuts this process won."""
    cuts = []
    for turn in await database_sync_to_async(interrupted)(now or timezone.now()):
        if (won := await recover(turn)) is not None:
            cuts.append(won)
    return cuts


# --- 2. the attempt ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attempt:
    """What the engine does with a claimed recovery turn.

    ``run``: stream it, as a continuation of message ``message_id`` or as a retry; the model sees
    the transcript up to ``history_end`` (later messages belong to turns queued behind it).
    Otherwise the attempt ended here with ``status`` and ``error``.
    """

    run: bool
    status: str = Turn.Status.COMPLETED
    error: str = ""
    continuation: bool = False
    history_end: str | None = None
    # The partial's last text part is still streaming: the continuation's first ``text-start``
    # is dropped so its text goes on in that part (docs/protocol.md#recovering-frames).
    merge_text: bool = False


def _partial(stream: StreamRecord | None, messages: list[UIMessage]) -> MessageBuilder:
    """The reply of a cut turn as far as its stored chunks go, over the transcript ``messages``."""
    if stream is None:
        return MessageBuilder.new("")
    stored = next((m for m in messages if m.get("id") == stream.message_id), None)
    builder = MessageBuilder(clone(stored)) if stream.continuation and stored else MessageBuilder.new(stream.message_id)
    for _, body in buffer.read(stream):
        builder.apply(json.loads(body))
    return builder


@dataclass
class _Situation:
    """What an attempt starts from, read in one go."""

    instance: AgentInstance
    incident: RecoveryIncident
    cut: Turn
    partial: MessageBuilder
    messages: list[UIMessage]


def _situation(attempt: Turn) -> _Situation:
    incident = RecoveryIncident.objects.get(pk=attempt.incident_id)
    cut_turn = Turn.objects.get(pk=attempt.recovers_id)
    # An attempt that died before it opened a stream left the partial where it was: look back.
    source: Turn | None = cut_turn
    stream = None
    while source is not None:
        stream = StreamRecord.objects.filter(turn=source).first()
        if stream is not None or source.kind != Turn.Kind.RECOVERY:
            break
        source = Turn.objects.filter(pk=source.recovers_id).first()
    messages = transcript.load(attempt.instance_id)
    return _Situation(AgentInstance.objects.get(pk=attempt.instance_id), incident, cut_turn,
                      _partial(stream, messages), messages)


def _awaits_user(part: dict[str, Any], client_tools: set[str]) -> bool:
    """A part only the user can move on: an approval, or a call of a tool that runs in the browser."""
    if not is_tool_part(part):
        return False
    state = part.get("state")
    return state == "approval-requested" or (
        state in ("input-streaming", "input-available") and part.get("toolName") in client_tools)


def _repair(message: UIMessage, scope: str, client_tools: set[str]) -> UIMessage:
    """Server tool calls the cut left unanswered get an answer before the model sees them again.

    The action ledger decides for calls that claimed a row: a settled side effect is replayed,
    one in an unknown state is reported as pending (``ActionPendingError``), never run again
    blindly. A call that never claimed one did nothing, and is answered as interrupted.
    """
    repaired = clone(message)
    for part in repaired.get("parts", []):
        if not is_tool_part(part) or part.get("state") not in ("input-streaming", "input-available"):
            continue
        if part.get("toolName") in client_tools:
            continue
        part.setdefault("input", {})
        record = ledger.recorded_call(scope, str(part.get("toolCallId", "")))
        if record is None:
            part.update(state="output-error", errorText=INTERRUPTED_TOOL_CALL)
        else:
            output = record.value if record.outcome == "replayed" else pending_error()
            part.update(state="output-available", output=output)
    return repaired


def _settled_only(message: UIMessage) -> UIMessage:
    """``persist: False``: only the tool results that settled are kept."""
    settled = [p for p in message.get("parts", []) if is_tool_part(p) and p.get("state") in (
        "output-available", "output-error", "output-denied")]
    return {**message, "parts": settled}


def _request_of(turn: Turn) -> str | None:
    return turn.message_ids[-1] if turn.message_ids else None


def _policy(instance: AgentInstance) -> transcript.Policy:
    try:
        return transcript.Policy.of(registry.agent_for(instance))
    except UnknownAgent:  # its class left AGENT_CLASSES: store as the built-ins prepare it
        return transcript.DEFAULT_POLICY


def _store(instance: AgentInstance, message: UIMessage, after: str | None) -> list[UIMessage]:
    if any(p.get("type") != "step-start" for p in message.get("parts", [])):
        transcript.save_message(instance, message, after=after, policy=_policy(instance))
    return transcript.load(instance)


def _update_incident(incident: RecoveryIncident, **fields: Any) -> None:
    for name, value in fields.items():
        setattr(incident, name, value)
    incident.save()


async def begin_attempt(attempt: Turn) -> Attempt:
    """Decide what a claimed recovery turn does, and prepare the transcript for it.

    Raises nothing the agent raises: a failing hook ends the incident as ``failed``.
    """
    s = await database_sync_to_async(_situation)(attempt)
    instance, incident, cut_turn = s.instance, s.incident, s.cut
    now = timezone.now()
    try:
        agent = registry.agent_for(instance)
    except UnknownAgent as exc:
        return await _give_up(s, attempt, None, ChatRecovery(), Status.FAILED, "", str(exc))
    config = ChatRecovery.resolve(agent.chat_recovery)
    budget = _budget(incident)
    client_tools = {str(t.get("name")) for t in (cut_turn.client_tools or []) if isinstance(t, dict)}
    message = s.partial.message
    kind = Kind.CONTINUE if s.partial.has_content() else Kind.RETRY
    ctx = ChatRecoveryContext(
        incident_id=incident.incident_id, recovery_root_request_id=incident.root_request_id,
        attempt=budget.attempt, max_attempts=config.max_attempts, recovery_kind=kind,
        stream_id=cut_turn.request_id, request_id=cut_turn.request_id,
        partial_text="".join(p.get("text", "") for p in message.get("parts", []) if p.get("type") == "text"),
        partial_parts=clone(message).get("parts", []), recovery_data=attempt.recovery_data,
        messages=s.messages, last_body=cut_turn.body, last_client_tools=cut_turn.client_tools,
        created_at=cut_turn.started_at or cut_turn.created_at,
    )
    after = _request_of(cut_turn)
    repaired = await database_sync_to_async(_repair)(message, str(instance.pk), client_tools)
    if any(_awaits_user(p, client_tools) for p in message.get("parts", [])):
        # Parked on the user: nothing to re-run until they answer.
        stored = await database_sync_to_async(_store)(instance, repaired, after)
        await database_sync_to_async(_update_incident)(
            incident, status=Status.SKIPPED, reason=AWAITING_INTERACTION, finished_at=now)
        await _ended(instance, incident, events.RECOVERY_SKIPPED, stored, reason=AWAITING_INTERACTION)
        return Attempt(run=False, status=Turn.Status.SKIPPED)
    reason = chat_recovery.exhausted_by(config, budget, now=now)
    if (reason is None and budget.attempt >= 2 and config.should_keep_recovering is not None
            and not await _keep_recovering(config, _progress(ctx, incident, now))):
        reason = Reason.ABORTED
    if reason is not None:
        return await _give_up(s, attempt, agent, config, Status.EXHAUSTED, reason, "", ctx=ctx, message=repaired)
    try:
        options = await agent.on_chat_recovery(ctx) or {}
    except Exception as exc:
        logger.exception("on_chat_recovery of %s raised", instance)
        return await _give_up(s, attempt, agent, config, Status.FAILED, "", str(exc) or type(exc).__name__,
                              message=repaired)
    persist, go_on = bool(options.get("persist", True)), bool(options.get("continue", True))
    stored = await database_sync_to_async(_store)(instance, repaired if persist else _settled_only(repaired), after)
    if not go_on:
        await database_sync_to_async(_update_incident)(
            incident, status=Status.SKIPPED, reason=CONTINUE_DISABLED, finished_at=now)
        await _ended(instance, incident, events.RECOVERY_SKIPPED, stored, reason=CONTINUE_DISABLED)
        return Attempt(run=False, status=Turn.Status.SKIPPED)
    if _awaits_an_answer(stored, client_tools) and not await _stable(instance, config, client_tools):
        # Another message still waits on the user after ``stable_timeout``: parked, as the reference does.
        await database_sync_to_async(_update_incident)(
            incident, status=Status.SKIPPED, reason=AWAITING_INTERACTION, finished_at=timezone.now())
        await _ended(instance, incident, events.RECOVERY_SKIPPED, stored, reason=AWAITING_INTERACTION)
        return Attempt(run=False, status=Turn.Status.SKIPPED)
    kept = next((m for m in stored if m.get("id") == message.get("id")), None) if message.get("id") else None
    kind = Kind.CONTINUE if kept is not None and kept.get("role") == "assistant" else Kind.RETRY
    continuation = kind == Kind.CONTINUE or cut_turn.continuation
    await database_sync_to_async(_start_attempt)(attempt, incident, kind, continuation, kept["id"] if kept else "")
    await fanout.publish(instance.pk, frames.chat_messages(stored))
    events.emit_chat(instance, events.RECOVERY_ATTEMPT, incidentId=incident.incident_id,
                     recoveryRootRequestId=incident.root_request_id, attempt=budget.attempt,
                     kind=str(kind), requestId=attempt.request_id)
    last = (kept or {}).get("parts", [])
    return Attempt(
        run=True, continuation=continuation, history_end=kept["id"] if kept else after,
        merge_text=bool(last) and last[-1].get("type") == "text" and last[-1].get("state") == "streaming",
    )


# How often an attempt waiting for a stable conversation looks again (seconds).
STABLE_POLL_SECONDS = 0.1


async def _stable(instance: AgentInstance, config: ChatRecovery, client_tools: set[str]) -> bool:
    """Wait up to ``stable_timeout`` until no stored message waits on the user; whether it came to that.

    The reference's recovery waits for a stable conversation (``waitUntilStable``) and parks on a
    client interaction still pending then. Our attempt holds the instance, so no other turn runs
    or starts meanwhile; what can still change is the user answering an earlier approval or client
    tool call (docs/architecture.md#attempt).
    """
    deadline = asyncio.get_running_loop().time() + config.stable_timeout
    while asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(STABLE_POLL_SECONDS)
        if not _awaits_an_answer(await database_sync_to_async(transcript.load)(instance), client_tools):
            return True
    return False


def _awaits_an_answer(messages: list[UIMessage], client_tools: set[str]) -> bool:
    """Whether a stored reply still waits on the user (an approval, a client tool call)."""
    return any(_awaits_user(part, client_tools) for message in messages
               if message.get("role") == "assistant" for part in message.get("parts", []))


def _progress(ctx: ChatRecoveryContext, incident: RecoveryIncident, now: datetime) -> ChatRecoveryProgressContext:
    """What ``should_keep_recovering`` is told: the attempt, the work done and the incident's age."""
    return ChatRecoveryProgressContext(
        incident_id=ctx.incident_id, request_id=ctx.request_id, recovery_root_request_id=ctx.recovery_root_request_id,
        attempt=ctx.attempt, max_attempts=ctx.max_attempts, recovery_kind=ctx.recovery_kind, work=incident.work,
        age=(now - incident.created_at).total_seconds(),
    )


async def _keep_recovering(config: ChatRecovery, ctx: ChatRecoveryProgressContext) -> bool:
    """``should_keep_recovering``: False gives up; raising means keep going (docs/architecture.md#recovery-budget)."""
    assert config.should_keep_recovering is not None
    try:
        answer = config.should_keep_recovering(ctx)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception:
        logger.exception("should_keep_recovering raised; recovery goes on")
        return True
    return bool(answer)


def _start_attempt(attempt: Turn, incident: RecoveryIncident, kind: Kind, continuation: bool,
                   message_id: str) -> None:
    _update_incident(incident, status=Status.ATTEMPTING, kind=str(kind))
    attempt.continuation, attempt.assistant_message_id = continuation, message_id
    Turn.objects.filter(pk=attempt.pk).update(continuation=continuation, assistant_message_id=message_id)


async def _give_up(s: _Situation, attempt: Turn, agent: ChatAgent | None, config: ChatRecovery, status: Status,
                   reason: str, error: str, *, ctx: ChatRecoveryContext | None = None,
                   message: UIMessage | None = None) -> Attempt:
    """Exhausted or failed: store the partial, show the terminal message, end the incident."""
    instance, incident = s.instance, s.incident
    stored = await database_sync_to_async(_store)(
        instance, message if message is not None else s.partial.message, _request_of(s.cut))
    await database_sync_to_async(_update_incident)(
        incident, status=status, reason=reason, error=error, finished_at=timezone.now())
    if status == Status.EXHAUSTED and config.on_exhausted is not None and ctx is not None:
        exhausted = ChatRecoveryExhaustedContext(
            reason=Reason(reason), incident_id=ctx.incident_id, recovery_root_request_id=ctx.recovery_root_request_id,
            attempt=ctx.attempt, max_attempts=ctx.max_attempts, terminal_message=config.terminal_message,
            partial_text=ctx.partial_text, partial_parts=ctx.partial_parts, recovery_data=ctx.recovery_data,
        )
        try:
            answer = config.on_exhausted(exhausted)
            if inspect.isawaitable(answer):
                await answer
        except Exception:
            logger.exception("on_exhausted of %s raised", instance)
    root = incident.root_request_id
    # The terminal message is replayed to clients that come back later (ACK case 3), as errors are.
    await AgentInstance.objects.filter(pk=instance.pk).aupdate(
        terminal_request_id=root, terminal_error=config.terminal_message)
    await fanout.publish(instance.pk, frames.chat_messages(stored))
    await fanout.publish(instance.pk, frames.thrown_error(request_id=root, error_text=config.terminal_message))
    name = events.RECOVERY_EXHAUSTED if status == Status.EXHAUSTED else events.RECOVERY_FAILED
    await _ended(instance, incident, name, None, reason=reason, error=error)
    return Attempt(run=False, status=Turn.Status.ERROR, error=error or config.terminal_message)


async def _ended(instance: AgentInstance, incident: RecoveryIncident, event: str, stored: list[UIMessage] | None,
                 **data: Any) -> None:
    """An incident ended: clients stop showing "recovering"; the event says how."""
    if stored is not None:
        await fanout.publish(instance.pk, frames.chat_messages(stored))
    await fanout.publish(instance.pk, frames.chat_recovering(recovering=False, request_id=incident.root_request_id))
    events.emit_chat(instance, event, incidentId=incident.incident_id,
                     recoveryRootRequestId=incident.root_request_id, attempt=incident.attempt, **data)


async def end_attempt(attempt: Turn, status: str, error: str = "") -> None:
    """A recovery attempt that streamed has ended: so has its incident (unless it was cut again)."""
    incident = await RecoveryIncident.objects.select_related("instance").aget(pk=attempt.incident_id)
    if not incident.is_open:
        return
    outcome, event = {
        Turn.Status.COMPLETED: (Status.COMPLETED, events.RECOVERY_COMPLETED),
        Turn.Status.ABORTED: (Status.SKIPPED, events.RECOVERY_SKIPPED),
    }.get(Turn.Status(status), (Status.FAILED, events.RECOVERY_FAILED))
    await database_sync_to_async(_update_incident)(
        incident, status=outcome, error=error, finished_at=timezone.now(),
        reason="aborted" if status == Turn.Status.ABORTED else "")
    await _ended(incident.instance, incident, event, None, requestId=attempt.request_id)


def sweep_expired(*, now: datetime | None = None) -> int:
    """Delete incidents that ended more than ``INCIDENT_RETENTION`` ago; returns how many."""
    deleted, _ = RecoveryIncident.objects.filter(
        finished_at__lt=(now or timezone.now()) - INCIDENT_RETENTION).exclude(
        status__in=chat_recovery.OPEN_STATUSES).delete()
    return deleted
