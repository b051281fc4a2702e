"""Scheduled prompts: where schedules come from, claiming each occurrence once, and running it as a turn.

Schedules are ``Schedule`` rows from three sources: operators (admin, REST API: ``store``),
``ChatAgent.get_scheduled_tasks()`` (``sync_declared`` adds, changes and removes the rows of each
instance), and the agent scheduling API (``add_agent_schedule`` ...; ``AgentHandle.schedule``).

Running them takes two steps, each settled by one SQL statement (style guide rule 3):

1. *Claim* (``tick``, every few seconds from Celery beat; any number of beat processes): the due
   schedules are one range of the ``schedule_due`` index; one INSERT of their occurrences
   (``<name>:<epoch ms>``) under a unique constraint decides which ticker owns each, and only
   the owner advances the schedule and hands the run to a worker (``agents_app.run_schedule``).
2. *Run* (``execute``, on a worker): a conditional UPDATE ``claimed → running`` lets one delivery
   of the task start it; a prompt run is a programmatic turn (``turns.save_messages``) whose
   user message is marked as the schedule's, streamed to everyone connected; the run records the
   turn's outcome, and a failure emits ``schedule:error``.

Missed occurrences: a schedule due while nothing ran (every process down) runs *once* when the
ticker is back, stamped with the first missed time; its next run is then the first occurrence
after now (``schedule_dsl.next_occurrence``), so missed slots are not replayed one by one.
"""

import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import BigIntegerField, Case, DateTimeField, F, Value, When
from django.utils import timezone

from . import conf, dispatch, events, registry, turns
from . import schedule_dsl as dsl
from .actions import call_maybe_async
from .agent import ChatAgent
from .errors import AgentConfigurationError
from .messages import UIMessage, new_message_id, new_request_id
from .models import AgentInstance, Schedule, ScheduleRun, Turn
from .schedule_dsl import ScheduledTask

__all__ = [
    "ScheduleEntry",
    "ScheduledTask",
    "add_agent_interval",
    "add_agent_schedule",
    "agent_schedules",
    "can_manage",
    "cancel_agent_schedule",
    "check_definition",
    "claim_due",
    "declared_tasks",
    "delete",
    "execute",
    "parse_for",
    "run_now",
    "save_operator_schedule",
    "set_enabled",
    "store",
    "sync_declared",
    "system_tasks",
    "tick",
]

logger = logging.getLogger(__name__)

# Occurrences claimed per statement; a tick claims batches until nothing more is due.
CLAIM_BATCH = 500
# A tick stops after this many batches (a schedule storm continues at the next tick).
MAX_BATCHES_PER_TICK = 20
# The ``spec`` of a one-off schedule of the agent API (it runs once, then its row is removed).
ONCE = "once"
# The owner part of an idempotency key: the instance's path, as the reference names its owner.
IDEMPOTENCY_OWNER = "{slug}/{name}"


def can_manage(user: Any) -> bool:
    """Whether ``user`` may see and change scheduled prompts: ``agents_app.manage_schedules`` (or superuser)."""
    return bool(user is not None and user.is_active and user.has_perm("agents_app.manage_schedules"))


# --- operators' schedules ---------------------------------------------------------------------------
def parse_for(slug: str, name: str, schedule: str, time_zone: str = "") -> dsl.Schedule:
    """What ``schedule`` (DSL or cron) means on instance ``slug/name`` (existing or not yet).

    The instance's ``get_default_timezone()`` applies when neither the schedule nor ``time_zone``
    names a zone.

    Raises:
        ScheduleError: with the spec's message (the admin form and the API show it as is).
        UnknownAgent: no agent class has that slug.
    """
    agent = registry.get_agent_class(slug)(AgentInstance(slug=slug, name=name))
    return dsl.parse(schedule, timezone=time_zone or None, default_timezone=agent.get_default_timezone())


def store(row: Schedule, parsed: dsl.Schedule, *, now: datetime | None = None) -> Schedule:
    """Save an operator's schedule: its parsed form, and its next run when that changes.

    The next run is computed from now when the schedule is new, when what it means changed, or when
    it is switched back on; otherwise (a new prompt, a new name) it stays, and no occurrence runs twice.
    """
    now = now or timezone.now()
    before = Schedule.objects.filter(pk=row.pk).values("spec", "enabled").first() if row.pk else None
    row.spec = dsl.to_spec(parsed)
    if before is None or before["spec"] != row.spec or (row.enabled and not before["enabled"]):
        row.next_run_at = dsl.next_occurrence(parsed, now)
    row.save()
    if before is None:
        events.emit_chat(row.instance, events.SCHEDULE_CREATE, id=row.name, callback=str(row.action))
    return row


def check_definition(agent: str, instance_name: str, name: str, schedule: str, time_zone: str = "", *,
                     pk: int | None = None) -> tuple[dsl.Schedule | None, dict[str, str]]:
    """An operator's schedule checked as the admin form and the API both check it.

    Returns the parsed schedule, or None and the problems by field (``agent``, ``instance``,
    ``name``, ``schedule``, ``timezone``), each message ready to show.
    """
    errors: dict[str, str] = {}
    if agent not in registry.agent_classes():
        errors["agent"] = f"No agent is registered under {agent!r}"
    if not registry.valid_name(instance_name):
        errors["instance"] = f"Invalid instance name {instance_name!r}: no slash or space, at most 200 characters"
    try:
        dsl.validate_task_id(name)
    except dsl.ScheduleError as exc:
        errors["name"] = str(exc)
    if time_zone:
        try:
            dsl.validate_timezone(time_zone)
        except dsl.ScheduleError as exc:
            errors["timezone"] = str(exc)
    if errors:
        return None, errors
    try:
        parsed = parse_for(agent, instance_name, schedule, time_zone)
    except dsl.ScheduleError as exc:
        return None, {"schedule": str(exc)}
    taken = Schedule.objects.filter(instance__slug=agent, instance__name=instance_name, instance__owner=None,
                                    instance__parent=None, name=name).exclude(pk=pk)
    if taken.exists():
        return None, {"name": f'{agent}/{instance_name} has a schedule named "{name}" already'}
    return parsed, {}


def save_operator_schedule(row: Schedule, agent: str, instance_name: str, parsed: dsl.Schedule, user: Any, *,
                           now: datetime | None = None) -> Schedule:
    """Save what an operator submitted (``check_definition`` passed): on instance ``agent/instance_name``
    of the global namespace (no owner: the instances code opens with ``aget(name)``, which staff
    open in the chat with ``?owner=``), created if it does not exist yet.
    """
    row.instance, _ = AgentInstance.objects.get_or_create(slug=agent, name=instance_name, owner=None, parent=None)
    row.source = Schedule.Source.OPERATOR
    row.action = Schedule.Action.PROMPT
    if row.created_by_id is None and getattr(user, "pk", None):
        row.created_by = user
    return store(row, parsed, now=now)


def delete(row: Schedule) -> None:
    """Remove a schedule (and its run history)."""
    row.delete()
    events.emit_chat(row.instance, events.SCHEDULE_CANCEL, id=row.name, callback=str(row.action))


def set_enabled(schedule_ids: Iterable[int], enabled: bool, *, now: datetime | None = None) -> int:
    """Pause or resume schedules; returns how many changed.

    A resumed schedule runs next at its first occurrence after now: the time it spent paused
    leaves no occurrence to catch up.
    """
    now = now or timezone.now()
    if not enabled:
        return Schedule.objects.filter(pk__in=list(schedule_ids), enabled=True).update(enabled=False)
    changed = 0
    for pk, spec, next_run_at in Schedule.objects.filter(pk__in=list(schedule_ids), enabled=False).values_list(
            "pk", "spec", "next_run_at"):
        upcoming = next_run_at if spec["kind"] == ONCE else dsl.next_occurrence(dsl.from_spec(spec), now)
        changed += Schedule.objects.filter(pk=pk, enabled=False).update(enabled=True, next_run_at=upcoming)
    return changed


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
    """The handler context of a run (spec §4.7 ``ThinkScheduledTaskContext``)."""
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


# --- schedules declared in code ---------------------------------------------------------------------
@dataclass(frozen=True)
class DeclaredTask:
    """A validated ``get_scheduled_tasks()`` entry."""

    task_id: str
    schedule: dsl.Schedule
    written: str
    timezone: str
    prompt: str | Callable[[], Any] | None
    handler: Callable[[dsl.ScheduledTaskContext], Any] | None
    metadata: dict[str, Any] | None

    @property
    def action(self) -> str:
        return Schedule.Action.HANDLER if self.handler is not None else Schedule.Action.PROMPT

    @property
    def definition_hash(self) -> str:
        """What the row stores of the task beyond its schedule: a changed hash updates the row in place."""
        prompt = self.prompt if isinstance(self.prompt, str) else "<function>"
        return _hash({"action": self.action, "prompt": prompt, "metadata": self.metadata})


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def declared_tasks(agent: ChatAgent) -> dict[str, DeclaredTask]:
    """``agent.get_scheduled_tasks()``, validated.

    Raises:
        AgentConfigurationError: a task id, schedule or time zone is invalid, or a task has both
            or neither of ``prompt`` and ``handler`` (``manage.py check`` reports it too: E006).
    """
    try:
        default = agent.get_default_timezone()
        tasks = {}
        for task_id, task in agent.get_scheduled_tasks().items():
            dsl.validate_task_id(task_id)
            prompt, handler = task.get("prompt"), task.get("handler")
            if (prompt is None) == (handler is None):
                raise dsl.ScheduleError(f'Scheduled task "{task_id}" must define exactly one of prompt or handler')
            schedule = dsl.parse(task["schedule"], timezone=task.get("timezone"), default_timezone=default)
            tasks[task_id] = DeclaredTask(task_id=task_id, schedule=schedule, written=task["schedule"],
                                          timezone=task.get("timezone") or "", prompt=prompt, handler=handler,
                                          metadata=task.get("metadata"))
    except (dsl.ScheduleError, KeyError) as exc:
        message = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise AgentConfigurationError(f"get_scheduled_tasks() of {type(agent).__qualname__}: {message}") from exc
    return tasks


def sync_declared(*, instance: AgentInstance | None = None, now: datetime | None = None) -> dict[str, int]:
    """Make the code rows of every instance (or of ``instance``) match ``get_scheduled_tasks()``.

    A new task gets a row; a task whose schedule changed runs next at its new schedule's first
    occurrence; a changed prompt or metadata updates the row and keeps its next run; a task no
    longer declared loses its row. An unchanged task is not touched, so syncing as often as one
    likes never moves a next run (and occurrence keys stop any run from happening twice).
    Returns counts; an instance whose declaration is invalid is logged and left as it was.
    """
    now = now or timezone.now()
    counts = {"created": 0, "rescheduled": 0, "updated": 0, "deleted": 0, "invalid": 0}
    classes = registry.agent_classes()
    instances = [instance] if instance is not None else AgentInstance.objects.filter(slug__in=classes).iterator()
    rows = Schedule.objects.filter(source=Schedule.Source.CODE)
    if instance is not None:
        rows = rows.filter(instance=instance)
    existing: dict[tuple[int, str], Schedule] = {(row.instance_id, row.name): row for row in rows}
    created: list[Schedule] = []
    for each in instances:
        try:
            declared = declared_tasks(classes[each.slug](each))
        except AgentConfigurationError:
            logger.exception("schedules of %s not synchronised", each)
            counts["invalid"] += 1
            existing = {key: row for key, row in existing.items() if key[0] != each.pk}
            continue
        for task in declared.values():
            row = existing.pop((each.pk, task.task_id), None)
            if row is None:
                created.append(_declared_row(Schedule(instance=each, name=task.task_id, source=Schedule.Source.CODE),
                                             task, now))
            elif row.spec != dsl.to_spec(task.schedule):
                _declared_row(row, task, now).save()
                counts["rescheduled"] += 1
            elif row.definition_hash != task.definition_hash:
                _declared_row(row, task, None).save()
                counts["updated"] += 1
    Schedule.objects.bulk_create(created)
    counts["created"] = len(created)
    if existing:
        counts["deleted"] = Schedule.objects.filter(pk__in=[row.pk for row in existing.values()]).delete()[1].get(
            Schedule._meta.label, 0)
    return counts


def _declared_row(row: Schedule, task: DeclaredTask, now: datetime | None) -> Schedule:
    """``row`` as ``task`` declares it; rescheduled from ``now`` unless it is None."""
    row.action = task.action
    row.prompt = task.prompt if isinstance(task.prompt, str) else ""
    row.metadata = task.metadata
    row.schedule, row.timezone = task.written, task.timezone
    row.spec = dsl.to_spec(task.schedule)
    row.definition_hash = task.definition_hash
    if now is not None:
        row.next_run_at = dsl.next_occurrence(task.schedule, now)
    return row


def on_instance_saved(sender: type[AgentInstance], instance: AgentInstance, created: bool, raw: bool = False,
                      **kwargs: Any) -> None:
    """A new instance gets the schedules its class declares at once (``post_save`` receiver)."""
    if not created or raw:
        return
    try:
        agent_class = registry.agent_classes().get(instance.slug)
    except AgentConfigurationError:  # AGENT_CLASSES is broken: system check E001 says how
        return
    if agent_class is not None and agent_class.get_scheduled_tasks is not ChatAgent.get_scheduled_tasks:
        sync_declared(instance=instance)


# --- the agent scheduling API ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ScheduleEntry:
    """A schedule made with ``agent.schedule()`` / ``schedule_every()`` (the reference's ``Schedule``)."""

    id: str
    callback: str
    payload: Any
    # "delayed" (seconds from now), "scheduled" (a datetime), "cron" (a cron or DSL string) or "interval".
    type: str
    # The next run; None while paused.
    time: datetime | None
    cron: str | None = None
    interval_seconds: int | None = None
    delay_in_seconds: float | None = None


def _entry(row: Schedule) -> ScheduleEntry:
    spec = row.spec
    kind = spec.get("type") or ("interval" if spec["kind"] == "interval" else "cron")
    return ScheduleEntry(
        id=row.name, callback=row.callback, payload=row.payload, type=kind,
        time=row.next_run_at if row.enabled else None,
        cron=row.schedule if kind == "cron" else None, interval_seconds=spec.get("seconds"),
        delay_in_seconds=spec.get("delay"),
    )


def _method(agent_class: type[ChatAgent], callback: str) -> str:
    if not callable(getattr(agent_class, callback, None)):
        raise ValueError(f"{agent_class.__qualname__}.{callback} is not a method")
    return callback


def add_agent_schedule(instance: AgentInstance, agent_class: type[ChatAgent], when: float | datetime | str,
                       callback: str, payload: Any = None, *, idempotent: bool | None = None,
                       time_zone: str | None = None, now: datetime | None = None) -> ScheduleEntry:
    """``agent.schedule(when, callback, payload)``: call ``callback(payload, ctx)`` at ``when``.

    ``when``: seconds from now, an aware datetime, or a cron or DSL string (recurring; read in
    ``time_zone``, else the agent's default zone, else UTC). ``idempotent`` (default: True for a
    string, as the reference's cron schedules) returns the existing schedule with the same
    callback, payload and ``when`` instead of adding one.
    """
    now = now or timezone.now()
    _method(agent_class, callback)
    if isinstance(when, str):
        parsed = parse_for(instance.slug, instance.name, when, time_zone or "")
        spec, written, first = dsl.to_spec(parsed), when, dsl.next_occurrence(parsed, now)
    elif isinstance(when, datetime):
        if timezone.is_naive(when):
            raise ValueError("schedule(): pass an aware datetime (e.g. django.utils.timezone.now() + timedelta(...))")
        spec, written, first = {"kind": ONCE, "type": "scheduled"}, "", when
    elif isinstance(when, int | float) and not isinstance(when, bool) and when >= 0:
        spec, written, first = {"kind": ONCE, "type": "delayed", "delay": when}, "", now + timedelta(seconds=when)
    else:
        raise ValueError(f"schedule(): when must be seconds ≥ 0, an aware datetime or a cron string, not {when!r}")
    definition = {"callback": callback, "payload": payload, "spec": spec, "at": None if written else first}
    return _add(instance, callback, payload, spec, written, first, definition,
                isinstance(when, str) if idempotent is None else idempotent)


def add_agent_interval(instance: AgentInstance, agent_class: type[ChatAgent], seconds: int, callback: str,
                       payload: Any = None, *, now: datetime | None = None) -> ScheduleEntry:
    """``agent.schedule_every(seconds, callback, payload)``: every ``seconds`` from now; idempotent."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 1:
        raise ValueError(f"schedule_every(): seconds must be a whole number ≥ 1, not {seconds!r}")
    _method(agent_class, callback)
    now = now or timezone.now()
    interval = dsl.IntervalSchedule(seconds=seconds, normalized=f"every {seconds} seconds")
    spec = dsl.to_spec(interval)
    return _add(instance, callback, payload, spec, "", dsl.next_occurrence(interval, now),
                {"callback": callback, "payload": payload, "spec": spec}, True)


def _add(instance: AgentInstance, callback: str, payload: Any, spec: dict[str, Any], written: str, first: datetime,
         definition: dict[str, Any], idempotent: bool) -> ScheduleEntry:
    """One row; an idempotent one is named after its definition, so the unique name settles a race."""
    digest = _hash(definition)
    name = f"sch_{digest[:20]}" if idempotent else f"sch_{secrets.token_hex(10)}"
    row, created = Schedule.objects.get_or_create(instance=instance, name=name, defaults={
        "source": Schedule.Source.AGENT, "action": Schedule.Action.METHOD, "callback": callback,
        "payload": payload, "schedule": written, "spec": spec, "next_run_at": first, "definition_hash": digest,
    })
    if created:
        events.emit_chat(instance, events.SCHEDULE_CREATE, id=name, callback=callback)
    return _entry(row)


def agent_schedules(instance: AgentInstance, *, schedule_id: str | None = None,
                    schedule_type: str | None = None) -> list[ScheduleEntry]:
    """The instance's pending ``agent.schedule()`` schedules (one-off ones until they have run)."""
    rows = Schedule.objects.filter(instance=instance, source=Schedule.Source.AGENT).order_by("next_run_at", "pk")
    if schedule_id is not None:
        rows = rows.filter(name=schedule_id)
    entries = [_entry(row) for row in rows]
    return [e for e in entries if e.type == schedule_type] if schedule_type else entries


def cancel_agent_schedule(instance: AgentInstance, schedule_id: str) -> bool:
    """Remove one ``agent.schedule()`` schedule; False if the instance has none by that id."""
    row = Schedule.objects.filter(instance=instance, source=Schedule.Source.AGENT, name=schedule_id).first()
    if row is None:
        return False
    delete(row)
    return True


# --- system tasks (read-only) -----------------------------------------------------------------------
def system_tasks() -> list[dict[str, str]]:
    """The maintenance tasks Celery beat runs, registered in code (``CELERY_BEAT_SCHEDULE``).

    The admin shows them beside operators' schedules, read-only: nobody switches off a sweep by mistake.
    """
    beat = getattr(settings, "CELERY_BEAT_SCHEDULE", {})
    return [{"name": name, "task": entry["task"], "schedule": _describe(entry["schedule"])}
            for name, entry in sorted(beat.items())]


def _describe(schedule: Any) -> str:
    """``every 5 s`` for an interval, ``cron 17 * * * *`` for a Celery crontab."""
    if isinstance(schedule, timedelta):
        return f"every {schedule.total_seconds():g} s"
    fields = str(schedule).removeprefix("<crontab: ").removesuffix(" (m/h/dM/MY/d)>")
    return f"cron {fields}"

