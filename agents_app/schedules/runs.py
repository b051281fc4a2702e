"""Scheduled runs: claiming each occurrence of a schedule once, and running it as a turn.

Schedules come from operators (``definitions``), the agents' code and the agent scheduling API
(``declared``). Two steps, each settled by one SQL statement (docs/architecture.md#claims-and-runs):
*claim* (``tick``, from Celery beat, any number of beat processes: one INSERT of the due
occurrences under a unique constraint decides which ticker owns each; only the owner advances the
schedule and hands the run to ``agents_app.run_schedule``) and *run* (``execute``, on a worker: a
conditional UPDATE ``claimed → running`` lets one delivery start it; a prompt run is a programmatic
turn; a failure emits ``schedule:error``). Occurrences missed while every process was down run
once, stamped with the first missed time; they are not replayed one by one.
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Case, DateTimeField, F, Value, When
from django.utils import timezone

from .. import conf, dispatch, events, registry, turns
from ..actions import call_maybe_async
from ..messages import UIMessage, new_message_id, new_request_id
from ..metrics import instruments as metrics
from ..models import Schedule, ScheduleRun, Turn
from . import language as dsl
from .declared import declared_tasks
from .definitions import ONCE

__all__ = ["claim_due", "claim_manual", "context_of", "execute", "recover_lost", "run_now", "scheduled_message",
           "tick"]

logger = logging.getLogger(__name__)

# Occurrences claimed per statement; a tick claims batches until nothing more is due.
CLAIM_BATCH = 500
# A tick stops after this many batches (a schedule storm continues at the next tick).
MAX_BATCHES_PER_TICK = 20
# The owner part of an idempotency key: the instance's path, as the reference names its owner.
IDEMPOTENCY_OWNER = "{slug}/{name}"



# --- claiming occurrences ---------------------------------------------------------------------------
def _next_after(spec: dict[str, Any], scheduled_for: datetime, now: datetime) -> datetime | None:
    """The occurrence after the one claimed (the first one after now: missed slots are skipped)."""
    if spec["kind"] == ONCE:
        return None
    return dsl.next_occurrence(dsl.from_spec(spec), now, previous=scheduled_for)


def claim_due(*, now: datetime | None = None, limit: int = CLAIM_BATCH) -> tuple[int, list[int]]:
    """Claim up to ``limit`` due occurrences; returns (how many were due, the runs this call won).

    Every ticker INSERTs the occurrences it saw due; the unique constraint keeps one row per
    occurrence, and a ticker reads back the rows that carry its own request ids: those it won.
    It advances only those schedules, and only if no one changed them meanwhile (``next_run_at``
    still the claimed time), in one UPDATE. A few statements per batch, however many schedules
    exist that are not due.
    """
    now = now or timezone.now()
    due = list(Schedule.objects.filter(enabled=True, next_run_at__lte=now).order_by("next_run_at", "pk")
               .values_list("pk", "instance_id", "name", "next_run_at", "spec")[:limit])
    if not due:
        return 0, []
    # The same order in every ticker, so concurrent inserts take their locks in one order.
    claims = [
        ScheduleRun(schedule_id=pk, instance_id=instance_id, occurrence_key=dsl.occurrence_key(name, at),
                    scheduled_for=at, request_id=new_request_id(), claimed_at=now, attempted_at=now)
        for pk, instance_id, name, at, _ in due
    ]
    specs = {pk: (at, spec) for pk, _, _, at, spec in due}
    with transaction.atomic():
        ScheduleRun.objects.bulk_create(claims, ignore_conflicts=True)
        won = list(ScheduleRun.objects.filter(
            occurrence_key__in=[c.occurrence_key for c in claims], request_id__in=[c.request_id for c in claims],
        ).values_list("pk", "schedule_id"))
        if won:
            _advance(won, specs, now)
    return len(due), [run_pk for run_pk, _ in won]


def _advance(won: list[tuple[int, int]], specs: dict[int, tuple[datetime, dict[str, Any]]], now: datetime) -> None:
    """Move each won schedule to its next occurrence and point it at its new run, in one UPDATE."""
    next_runs, last_runs = [], []
    for run_pk, schedule_pk in won:
        at, spec = specs[schedule_pk]
        upcoming = Value(_next_after(spec, at, now), output_field=DateTimeField())
        next_runs.append(When(pk=schedule_pk, next_run_at=at, then=upcoming))
        last_runs.append(When(pk=schedule_pk, then=Value(run_pk)))
    Schedule.objects.filter(pk__in=[schedule_pk for _, schedule_pk in won]).update(
        next_run_at=Case(*next_runs, default=F("next_run_at"), output_field=DateTimeField()),
        last_run_id=Case(*last_runs, default=F("last_run_id"), output_field=BigIntegerField()),
    )


def claim_manual(schedule_id: int, *, actor: Any = None, now: datetime | None = None) -> ScheduleRun:
    """Claim an extra occurrence now ("run now"); the schedule's own next run does not move."""
    now = now or timezone.now()
    schedule = Schedule.objects.select_related("instance").get(pk=schedule_id)
    run = ScheduleRun(schedule=schedule, instance=schedule.instance, scheduled_for=now,
                      occurrence_key=dsl.occurrence_key(schedule.name, now), trigger=ScheduleRun.Trigger.MANUAL,
                      triggered_by=actor if getattr(actor, "pk", None) else None, request_id=new_request_id(),
                      claimed_at=now, attempted_at=now)
    try:
        with transaction.atomic():
            run.save(force_insert=True)
            Schedule.objects.filter(pk=schedule_id).update(last_run=run)
    except IntegrityError:
        # A second "run now" in the same millisecond: the same occurrence, already claimed.
        return ScheduleRun.objects.get(instance=schedule.instance, occurrence_key=run.occurrence_key)
    return run


def recover_lost(*, now: datetime | None = None, limit: int = CLAIM_BATCH) -> list[int]:
    """Runs to hand to a worker again; settles runs whose worker is gone (one query when none).

    A claimed run not started within ``AGENT_SCHEDULE_RUN_LEASE`` (its task was lost with a broker
    or a ticker) is sent again: only one delivery can start it. A running prompt run whose turn
    has ended (its worker died after the turn, or the recovery sweep ended the turn) takes the
    turn's outcome; one with no turn, or a handler run past the lease, failed with its worker.
    """
    now = now or timezone.now()
    lease: timedelta = conf.get("AGENT_SCHEDULE_RUN_LEASE")
    stale = list(ScheduleRun.objects.filter(status__in=ScheduleRun.UNFINISHED_STATUSES, attempted_at__lt=now - lease)
                 .select_related("schedule", "instance").order_by("attempted_at")[:limit])
    again = []
    for run in stale:
        retry = ScheduleRun.objects.filter(pk=run.pk, status=run.status, attempted_at=run.attempted_at)
        if run.status == ScheduleRun.Status.CLAIMED:
            if retry.update(attempted_at=now):
                again.append(run.pk)
            continue
        turn = Turn.objects.filter(instance_id=run.instance_id, request_id=run.request_id).only(
            "status", "error").first()
        if turn is not None and not turn.is_finished:
            retry.update(attempted_at=now)
        elif turn is not None:
            _finish(run, turn.status, turn.error, now=now)
        else:
            _finish(run, ScheduleRun.Status.FAILED, "The worker running it was lost before it finished.", now=now)
    return again


async def tick(*, now: datetime | None = None) -> dict[str, int]:
    """Claim what is due (and what was lost) and hand each run to a worker: what beat runs.

    Returns ``{"claimed", "resent"}``. ``AGENT_SCHEDULE_RUNS = "inline"`` runs them here instead.
    """
    now = now or timezone.now()
    again = await database_sync_to_async(recover_lost)(now=now)
    claimed: list[int] = []
    for _ in range(MAX_BATCHES_PER_TICK):
        due, won = await database_sync_to_async(claim_due)(now=now)
        claimed += won
        if due < CLAIM_BATCH:
            break
    await _hand_over([*again, *claimed])
    return {"claimed": len(claimed), "resent": len(again)}


async def run_now(schedule_id: int, *, actor: Any = None) -> ScheduleRun:
    """Run a schedule once, now, whatever its schedule says (the admin's and the API's "run now")."""
    run = await database_sync_to_async(claim_manual)(schedule_id, actor=actor)
    await _hand_over([run.pk])
    return run


async def _hand_over(run_ids: list[int]) -> None:
    """Give claimed runs to workers (``agents_app.run_schedule``), or run them here when inline."""
    if not run_ids:
        return
    if conf.get("AGENT_SCHEDULE_RUNS") == "inline":
        for run_id in run_ids:
            await execute(run_id)
        return
    await dispatch.enqueue_each(dispatch.RUN_SCHEDULE, [(run_id,) for run_id in run_ids])


# --- running one occurrence -------------------------------------------------------------------------
def _start(run_id: int) -> ScheduleRun | None:
    """``claimed → running``, once, however often the task is delivered; None if not this delivery's."""
    now = timezone.now()
    started = ScheduleRun.objects.filter(pk=run_id, status=ScheduleRun.Status.CLAIMED).update(
        status=ScheduleRun.Status.RUNNING, started_at=now, attempted_at=now)
    if not started:
        return None
    return ScheduleRun.objects.select_related("schedule", "instance").get(pk=run_id)


def _finish(run: ScheduleRun, status: str, error: str = "", *, now: datetime | None = None) -> None:
    """Record the outcome; count failures in a row; drop a one-off schedule that has run."""
    schedule = run.schedule
    failed = status in ScheduleRun.FAILED_STATUSES
    with transaction.atomic():
        ScheduleRun.objects.filter(pk=run.pk).update(status=status, error=error or "",
                                                     finished_at=now or timezone.now())
        if failed:
            Schedule.objects.filter(pk=schedule.pk).update(consecutive_failures=F("consecutive_failures") + 1)
        elif status == ScheduleRun.Status.COMPLETED:
            Schedule.objects.filter(pk=schedule.pk).update(consecutive_failures=0)
        if schedule.spec["kind"] == ONCE and run.trigger == ScheduleRun.Trigger.SCHEDULE:
            Schedule.objects.filter(pk=schedule.pk).delete()
    if failed:
        events.emit_chat(run.instance, events.SCHEDULE_ERROR, id=schedule.name, callback=schedule.action,
                         occurrenceKey=run.occurrence_key, requestId=run.request_id, status=str(status), error=error)


async def execute(run_id: int) -> str | None:
    """Run a claimed occurrence (the ``agents_app.run_schedule`` task); returns its status.

    None when another delivery of the task started it already. Whatever fails (an agent class no
    longer registered, a handler that raises, a turn that errs) is recorded on the run, counted
    on the schedule and emitted as ``schedule:error``: an operator sees it in the admin.
    """
    run = await database_sync_to_async(_start)(run_id)
    if run is None:
        return None
    schedule = run.schedule
    if run.trigger == ScheduleRun.Trigger.SCHEDULE:  # due → started (a "run now" has no due time)
        metrics.schedule_started(run.scheduled_for, run.started_at or timezone.now())
    events.emit_chat(run.instance, events.SCHEDULE_EXECUTE, id=schedule.name, callback=schedule.action,
                     occurrenceKey=run.occurrence_key, requestId=run.request_id)
    try:
        status, error = await _perform(run)
    except Exception as exc:  # a run's failure, whatever raised it, is recorded and shown to operators
        logger.exception("scheduled run %s failed", run.occurrence_key)
        status, error = ScheduleRun.Status.FAILED, str(exc) or type(exc).__name__
    await database_sync_to_async(_finish)(run, status, error)
    return status


def context_of(run: ScheduleRun) -> dsl.ScheduledTaskContext:
    """The handler context of a run (the reference's ``ThinkScheduledTaskContext``)."""
    schedule, instance = run.schedule, run.instance
    spec = schedule.spec
    return dsl.ScheduledTaskContext.of(
        schedule.name, IDEMPOTENCY_OWNER.format(slug=instance.slug, name=instance.name), run.scheduled_for,
        schedule=spec.get("normalized", ""), schedule_kind=spec["kind"], timezone=spec.get("timezone"),
        metadata=schedule.metadata,
    )


async def _perform(run: ScheduleRun) -> tuple[str, str]:
    schedule, instance = run.schedule, run.instance
    agent = registry.agent_for(instance)
    context = context_of(run)
    action: Any = schedule.prompt
    if schedule.source == Schedule.Source.CODE:
        declared = declared_tasks(agent).get(schedule.name)
        if declared is None:
            return ScheduleRun.Status.SKIPPED, "No longer declared by get_scheduled_tasks()."
        action = declared.prompt if schedule.action == Schedule.Action.PROMPT else declared.handler
    if schedule.action in (Schedule.Action.HANDLER, Schedule.Action.METHOD):
        await agent.load_messages()  # ``self.messages`` for the handler, as the reference's scheduled callbacks see it
    if schedule.action == Schedule.Action.HANDLER:
        await call_maybe_async(action, context)
        return ScheduleRun.Status.COMPLETED, ""
    if schedule.action == Schedule.Action.METHOD:
        await call_maybe_async(getattr(agent, schedule.callback), schedule.payload, context)
        return ScheduleRun.Status.COMPLETED, ""
    text = await call_maybe_async(action) if callable(action) else action
    result = await turns.save_messages(instance, [scheduled_message(str(text), context)], request_id=run.request_id)
    return result.status, result.error or ""


def scheduled_message(text: str, context: dsl.ScheduledTaskContext) -> UIMessage:
    """The user message a prompt run posts: its metadata names the schedule and the occurrence."""
    return {"id": new_message_id(), "role": "user", "parts": [{"type": "text", "text": text}],
            "metadata": context.message_metadata()}
