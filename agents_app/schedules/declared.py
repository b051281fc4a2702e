"""Schedules from code: the ones agents declare (``get_scheduled_tasks()``, kept in line with the
code by ``sync_declared``) and the agent scheduling API (``AgentHandle.schedule`` and friends:
``add_agent_schedule`` ...), plus the read-only list of Celery beat's system tasks.

Both write ``Schedule`` rows that ``runs`` claims and runs like an operator's.
"""

import hashlib
import json
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from .. import events, registry
from ..agent import ChatAgent
from ..errors import AgentConfigurationError
from ..models import AgentInstance, Schedule
from . import language as dsl
from .definitions import ONCE, delete, parse_for

__all__ = [
    "DeclaredTask",
    "ScheduleEntry",
    "add_agent_interval",
    "add_agent_schedule",
    "agent_schedules",
    "cancel_agent_schedule",
    "declared_tasks",
    "on_instance_saved",
    "sync_declared",
    "system_tasks",
]

logger = logging.getLogger(__name__)

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

