"""The schedule language of scheduled prompts, cron, and occurrences (docs/architecture.md#schedule-language).

Pure (unit-tested without a database). ``parse()`` makes a ``Schedule``, ``next_occurrence()`` says
when it runs next, ``occurrence_key()`` names one run. The reference's grammar, after trimming,
collapsing whitespace and lower-casing; its error messages are the reference's too (naming
``get_default_timezone()`` for ``getDefaultTimezone()``)::

    interval  := "every " N (" minute" | " minutes" | " hour" | " hours")   N ≥ 1, singular iff N == 1
    wallclock := "every day at " HH:MM | "every weekday at " HH:MM
               | "every week on " DAY ("," DAY)* " at " HH:MM              DAY: sun|sunday|mon|monday|...
    schedule  := interval | wallclock [" in " IANA_TZ]

Extensions: five-field cron (UTC without ``in TZ``), sub-minute intervals for ``schedule_every()``.
Wall-clock times come from ``cronsim`` with Debian cron's DST rules (the reference's); intervals
count from the previous occurrence, in UTC.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Literal, TypedDict
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

__all__ = [
    "SCHEDULE_SOURCE",
    "CalendarSchedule",
    "IntervalSchedule",
    "Schedule",
    "ScheduleError",
    "ScheduledTaskContext",
    "epoch_ms",
    "from_spec",
    "next_occurrence",
    "occurrence_key",
    "parse",
    "scheduled_occurrence",
    "timezone_names",
    "to_spec",
    "validate_task_id",
    "validate_timezone",
]

# ``metadata.source`` of a user message a schedule posted (the chat page labels it "scheduled: <name>").
SCHEDULE_SOURCE = "schedule"

_INLINE_TIMEZONE = re.compile(r"^(.*) in ([A-Za-z_][A-Za-z0-9_+\-/]*)$")
_INTERVAL = re.compile(r"^every ([1-9]\d*) (minute|minutes|hour|hours)$")
_DAILY = re.compile(r"^every day at ([0-2]\d:[0-5]\d)$")
_WEEKDAY = re.compile(r"^every weekday at ([0-2]\d:[0-5]\d)$")
_WEEKLY = re.compile(r"^every week on ([a-z,\s]+) at ([0-2]\d:[0-5]\d)$")
_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_TASK_ID = re.compile(r"^[A-Za-z0-9_-]+$")
# Cron's day numbers (0 = Sunday), as the reference numbers its days.
DAY_NUMBERS = {
    "sun": 0, "sunday": 0, "mon": 1, "monday": 1, "tue": 2, "tuesday": 2, "wed": 3, "wednesday": 3,
    "thu": 4, "thursday": 4, "fri": 5, "friday": 5, "sat": 6, "saturday": 6,
}
# A cron expression has five fields (minute hour day-of-month month day-of-week).
CRON_FIELDS = 5


class ScheduleError(ValueError):
    """A schedule, time zone or task id that cannot be used; the message says why."""


@dataclass(frozen=True)
class IntervalSchedule:
    """Every ``seconds``, counted from the previous occurrence (the first one from creation)."""

    seconds: int
    normalized: str
    kind: Literal["interval"] = "interval"

    @property
    def timezone(self) -> None:
        return None


@dataclass(frozen=True)
class CalendarSchedule:
    """The times a cron expression names in a time zone: the DSL's wall-clock schedules and cron."""

    cron: str
    timezone: str
    normalized: str
    kind: Literal["wall-clock", "cron"] = "wall-clock"


Schedule = IntervalSchedule | CalendarSchedule


@cache
def _zones() -> dict[str, str]:
    """Every IANA zone name this machine knows, by its lower-cased spelling."""
    return {name.lower(): name for name in available_timezones()}


def timezone_names() -> list[str]:
    """The IANA zone names, sorted (the choices of a time zone select)."""
    return sorted(_zones().values())


def validate_timezone(name: str) -> str:
    """The canonical spelling of zone ``name`` (matched case-insensitively, as ``Intl`` does)."""
    canonical = _zones().get(name.lower())
    if canonical is None:
        raise ScheduleError(f'Invalid timezone "{name}"')
    return canonical


def validate_task_id(task_id: str) -> str:
    if not _TASK_ID.match(task_id):
        raise ScheduleError(f'Invalid scheduled task id "{task_id}"; use letters, numbers, "_" or "-"')
    return task_id


def parse(raw: str, *, timezone: str | None = None, default_timezone: str | None = None) -> Schedule:
    """The schedule ``raw`` names (module docstring), or ``ScheduleError`` with the reference's message.

    ``timezone`` is the task's own (an operator's choice, ``get_scheduled_tasks()``'s
    ``timezone``); ``default_timezone`` the agent's ``get_default_timezone()``.
    """
    trimmed = re.sub(r"\s+", " ", raw.strip()).lower()
    inline = _INLINE_TIMEZONE.match(trimmed)
    schedule, inline_timezone = (inline.group(1), inline.group(2)) if inline else (trimmed, None)
    if inline_timezone and timezone and validate_timezone(inline_timezone) != validate_timezone(timezone):
        raise ScheduleError(f'Schedule timezone "{inline_timezone}" does not match task timezone "{timezone}"')

    interval = _INTERVAL.match(schedule)
    if interval:
        if inline_timezone or timezone:
            raise ScheduleError("Interval schedules cannot specify a timezone")
        count, unit = int(interval.group(1)), interval.group(2)
        if count == 1 and unit.endswith("s"):
            raise ScheduleError(f'Use singular unit for "{raw}"')
        if count != 1 and not unit.endswith("s"):
            raise ScheduleError(f'Use plural unit for "{raw}"')
        return IntervalSchedule(seconds=count * (3600 if unit.startswith("hour") else 60),
                                normalized=f"every {count} {unit}")

    if not schedule.startswith("every ") and len(schedule.split(" ")) == CRON_FIELDS:
        return _cron(schedule, validate_timezone(inline_timezone or timezone or default_timezone or "UTC"))

    zone = inline_timezone or timezone or default_timezone
    if not zone:
        raise ScheduleError(f'Wall-clock schedule "{raw}" requires a timezone or get_default_timezone()')
    zone = validate_timezone(zone)
    if match := _DAILY.match(schedule):
        hour, minute = _time(match.group(1))
        return CalendarSchedule(cron=f"{minute} {hour} * * *", timezone=zone,
                                normalized=f"every day at {match.group(1)}")
    if match := _WEEKDAY.match(schedule):
        hour, minute = _time(match.group(1))
        return CalendarSchedule(cron=f"{minute} {hour} * * 1-5", timezone=zone,
                                normalized=f"every weekday at {match.group(1)}")
    if match := _WEEKLY.match(schedule):
        names = [day.strip() for day in match.group(1).split(",")]
        days = _days(names)
        hour, minute = _time(match.group(2))
        return CalendarSchedule(cron=f"{minute} {hour} * * {','.join(map(str, days))}", timezone=zone,
                                normalized=f"every week on {','.join(names)} at {match.group(2)}")
    raise ScheduleError(f'Unsupported schedule DSL "{raw}"')


def _time(value: str) -> tuple[int, int]:
    match = _TIME.match(value)
    if not match:
        raise ScheduleError(f'Invalid schedule time "{value}"; expected HH:mm')
    return int(match.group(1)), int(match.group(2))


def _days(names: list[str]) -> list[int]:
    days: list[int] = []
    for name in names:
        if name not in DAY_NUMBERS:
            raise ScheduleError(f'Invalid schedule day "{name}"')
        if DAY_NUMBERS[name] in days:
            raise ScheduleError(f'Duplicate schedule day "{name}"')
        days.append(DAY_NUMBERS[name])
    return days


def _cron(expression: str, zone: str) -> CalendarSchedule:
    try:
        next(CronSim(expression, datetime.now(UTC)))
    except CronSimError as exc:
        raise ScheduleError(f'Invalid cron expression "{expression}": {exc}') from None
    except StopIteration:
        raise ScheduleError(f'Invalid cron expression "{expression}": it never runs') from None
    return CalendarSchedule(cron=expression, timezone=zone, normalized=expression, kind="cron")


def next_occurrence(schedule: Schedule, now: datetime, previous: datetime | None = None) -> datetime:
    """The first occurrence after ``now`` (UTC): the catch-up rule of a missed schedule.

    An interval schedule counts from ``previous`` (its last occurrence; creation when None),
    skipping the occurrences already past; a calendar schedule takes the next matching wall-clock
    time in its zone. Either way, occurrences missed while nothing ran are not returned one by one.
    """
    if isinstance(schedule, IntervalSchedule):
        step = timedelta(seconds=schedule.seconds)
        if previous is None:
            return now + step
        return previous + step * ((now - previous) // step + 1)
    times = CronSim(schedule.cron, now.astimezone(ZoneInfo(schedule.timezone)))
    upcoming = next(times).astimezone(UTC)
    # cronsim walks wall-clock time: asked during the second pass of a fall-back hour, its next
    # match may be the first pass, already gone. (The first pass ran; the next is a day later.)
    while upcoming <= now:
        upcoming = next(times).astimezone(UTC)
    return upcoming


def to_spec(schedule: Schedule) -> dict[str, Any]:
    """A schedule as JSON (stored with the row, so the ticker never parses or asks the agent)."""
    if isinstance(schedule, IntervalSchedule):
        return {"kind": schedule.kind, "seconds": schedule.seconds, "normalized": schedule.normalized}
    return {"kind": schedule.kind, "cron": schedule.cron, "timezone": schedule.timezone,
            "normalized": schedule.normalized}


def from_spec(spec: dict[str, Any]) -> Schedule:
    """The schedule ``to_spec`` stored."""
    if spec["kind"] == "interval":
        return IntervalSchedule(seconds=int(spec["seconds"]), normalized=spec["normalized"])
    return CalendarSchedule(cron=spec["cron"], timezone=spec["timezone"], normalized=spec["normalized"],
                            kind=spec["kind"])


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def occurrence_key(task_id: str, scheduled_for: datetime) -> str:
    """``<task id>:<scheduled time in epoch ms>``: the name of one run, unique per agent instance."""
    return f"{task_id}:{epoch_ms(scheduled_for)}"


@dataclass(frozen=True, kw_only=True)
class ScheduledTaskContext:
    """What a scheduled handler is told about its run (the reference's ``ThinkScheduledTaskContext``).

    ``idempotency_key`` names this occurrence across retries and processes: pass it on to an
    action's ``idempotency_key`` (or any ledger) so a side effect happens once per occurrence.
    """

    task_id: str
    scheduled_for: int
    scheduled_for_date: datetime
    occurrence_key: str
    idempotency_key: str
    schedule: str
    schedule_kind: str
    timezone: str | None = None
    metadata: dict[str, Any] | None = field(default=None)

    @classmethod
    def of(cls, task_id: str, owner_key: str, scheduled_for: datetime, schedule: str, schedule_kind: str,
           timezone: str | None = None, metadata: dict[str, Any] | None = None) -> "ScheduledTaskContext":
        """The context of occurrence ``scheduled_for`` of task ``task_id`` of agent instance ``owner_key``."""
        key = occurrence_key(task_id, scheduled_for)
        return cls(task_id=task_id, scheduled_for=epoch_ms(scheduled_for), scheduled_for_date=scheduled_for,
                   occurrence_key=key, idempotency_key=f"think-schedule:{owner_key}:{key}", schedule=schedule,
                   schedule_kind=schedule_kind, timezone=timezone, metadata=metadata)

    def message_metadata(self) -> dict[str, Any]:
        """``metadata`` of the user message the run posts: the task's own, then what marks it as scheduled."""
        return {
            **(self.metadata or {}), "source": SCHEDULE_SOURCE, "schedule": self.task_id,
            "occurrence": self.occurrence_key, "scheduledFor": self.scheduled_for,
            "idempotencyKey": self.idempotency_key,
        }


def scheduled_occurrence(messages: Any) -> dict[str, Any] | None:
    """The schedule metadata of the turn's prompt (UIMessages), when a schedule posted it; else None.

    For actions: ``scheduled_occurrence(ctx.agent.messages)["idempotencyKey"]`` is the occurrence's
    key, the same on every retry of the run (``ctx.agent.messages``: the turn's transcript).
    """
    last_user = next((m for m in reversed(list(messages)) if m.get("role") == "user"), None)
    metadata = (last_user or {}).get("metadata") or {}
    return metadata if metadata.get("source") == SCHEDULE_SOURCE else None


class ScheduledTask(TypedDict, total=False):
    """One entry of ``get_scheduled_tasks()`` (the reference's ``ThinkScheduledTask``): a prompt or a handler."""

    schedule: str
    prompt: str | Callable[[], Any]
    handler: Callable[[ScheduledTaskContext], Any]
    timezone: str
    metadata: dict[str, Any]
