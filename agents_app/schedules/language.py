"""The schedule language of scheduled prompts, cron, and occurrences (docs/architecture.md#schedule-language).

Pure (unit-tested without a database). ``parse()`` makes a ``Schedule`` (its docstring has the
grammar), ``next_occurrence()`` says when it runs next, ``occurrence_key()`` names one run. The
expression is read before any zone, so a typo is reported as the word not understood (with a
suggestion and two valid examples), not as a missing zone; a misspelt zone is echoed as typed,
with the closest real one. Cron has five fields and runs in UTC without a zone. Wall-clock times
come from ``cronsim`` with Debian cron's DST rules; intervals count from the previous occurrence.
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from difflib import get_close_matches
from functools import cache
from typing import Any, Literal, NoReturn, TypedDict
from zoneinfo import ZoneInfo, available_timezones

from cronsim import CronSim, CronSimError

__all__ = [
    "SCHEDULE_SOURCE",
    "CalendarSchedule",
    "IntervalSchedule",
    "Schedule",
    "ScheduleError",
    "ScheduledTaskContext",
    "check_expression",
    "epoch_ms",
    "from_spec",
    "next_occurrence",
    "next_occurrences",
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

_INLINE_TIMEZONE = re.compile(r"^(.*) in ([A-Za-z_][A-Za-z0-9_+\-/]*)$", re.IGNORECASE)
_TOKENS = re.compile(r",|[^\s,]+")
_TIME_24 = re.compile(r"^(\d{1,2}):([0-5]\d)$")
_TIME_12 = re.compile(r"^(\d{1,2})(?::([0-5]\d))?(am|pm)$")
_TASK_ID = re.compile(r"^[A-Za-z0-9_-]+$")
# Cron's day numbers (0 = Sunday).
DAY_NUMBERS = {
    "sun": 0, "sunday": 0, "mon": 1, "monday": 1, "tue": 2, "tuesday": 2, "wed": 3, "wednesday": 3,
    "thu": 4, "thursday": 4, "fri": 5, "friday": 5, "sat": 6, "saturday": 6,
}
_DAY_NAMES = [name for name in DAY_NUMBERS if len(name) > 3]  # suggested for a typo (not "mon" for "month")
# What may follow "every": its cron day-of-week field, and the words a typo is compared with.
_DAY_SETS = {"day": "*", "weekday": "1-5", "weekend": "0,6"}
_AFTER_EVERY = ["minute", "hour", "day", "weekday", "weekend", "week", *_DAY_NAMES]
# A cron expression has five fields (minute hour day-of-month month day-of-week).
CRON_FIELDS = 5
# Two valid examples closing each message about a typo (the unit tests parse every one of them).
EXAMPLES = 'Try "every day at 09:00" or "every monday at 9am in Europe/Oslo".'
INTERVAL_EXAMPLES = 'Try "every 15 minutes" or "every 2 hours".'
TIME_EXAMPLES = 'Try "every day at 09:00" or "every day at 9:30pm".'
CRON_EXAMPLES = 'Try "0 9 * * 1-5" or "*/15 * * * *".'
# The zones offered: UTC and the IANA regions' places (no "Factory", "localtime", "Etc/GMT+5",
# "EST5EDT" or "US/Eastern", which still parse when typed: a stored schedule may name one).
_AREAS = frozenset({"Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia", "Europe",
                    "Indian", "Pacific"})
_NOT_ZONES = frozenset({"factory", "localtime", "posixrules"})
# How close a typo must be to a word or zone to be suggested (difflib's ratio).
SUGGESTION_CUTOFF = 0.7


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


@dataclass(frozen=True)
class _WallClock:
    """A wall-clock schedule read but not yet placed in a zone."""

    cron: str
    normalized: str


@dataclass(frozen=True)
class _Cron:
    expression: str


# --- time zones -----------------------------------------------------------------------------------
@cache
def _zones() -> dict[str, str]:
    """Every zone name this machine knows, by its lower-cased spelling (the files that are no zone left out)."""
    return {name.lower(): name for name in available_timezones()
            if name.lower() not in _NOT_ZONES and not name.startswith(("posix/", "right/"))}


@cache
def _offered() -> tuple[str, ...]:
    return tuple(sorted(name for name in _zones().values() if name == "UTC" or name.split("/")[0] in _AREAS))


def timezone_names() -> list[str]:
    """The zones offered, sorted (the choices of a time zone select): UTC and places only."""
    return list(_offered())


def _closest_zone(name: str) -> str | None:
    """The offered zone ``name`` most likely meant: by its full name, else by its place ("Oslo")."""
    typed = name.lower().replace(" ", "_")
    by_name = {zone.lower(): zone for zone in _offered()}
    if match := get_close_matches(typed, by_name, n=1, cutoff=SUGGESTION_CUTOFF):
        return by_name[match[0]]
    by_place = {zone.rsplit("/", 1)[-1].lower(): zone for zone in _offered() if "/" in zone}
    match = get_close_matches(typed.rsplit("/", 1)[-1], by_place, n=1, cutoff=SUGGESTION_CUTOFF)
    return by_place[match[0]] if match else None


def validate_timezone(name: str) -> str:
    """The canonical spelling of zone ``name`` (matched case-insensitively, as ``Intl`` does).

    A name that is no zone is echoed as typed, with the closest offered zone when one is close.
    """
    canonical = _zones().get(name.lower())
    if canonical is None:
        suggestion = _closest_zone(name)
        hint = f'; did you mean "{suggestion}"?' if suggestion else ""
        raise ScheduleError(f'Invalid timezone "{name}"{hint}')
    return canonical


def validate_task_id(task_id: str) -> str:
    if not _TASK_ID.match(task_id):
        raise ScheduleError(f'Invalid scheduled task id "{task_id}"; use letters, numbers, "_" or "-"')
    return task_id


# --- reading an expression ------------------------------------------------------------------------
class _Reader:
    """The words of one expression, read left to right; its errors name the word that went wrong."""

    def __init__(self, text: str, expression: str) -> None:
        self.text = text  # the whole schedule as typed (whitespace collapsed), for messages
        self.words = _TOKENS.findall(expression)
        self.at = 0

    def peek(self) -> str | None:
        return self.words[self.at].lower() if self.at < len(self.words) else None

    def take(self, missing: str, expected: str = "", examples: str = EXAMPLES) -> str:
        """The next word (lower-cased), or an error saying that ``missing`` is missing after the last one."""
        word = self.peek()
        if word is None:
            after = f' after "{self.words[-1]}"' if self.words else ""
            hint = f" (expected {expected})" if expected else ""
            raise ScheduleError(f'Could not read "{self.text}": {missing} is missing{after}{hint}. {examples}')
        self.at += 1
        return word

    def not_understood(self, hint: str, vocabulary: Iterable[str] = (), examples: str = EXAMPLES) -> NoReturn:
        """Fail on the word just taken: a close word of ``vocabulary`` is suggested, else ``hint`` says what fits."""
        word = self.words[self.at - 1]
        suggestion = get_close_matches(word.lower(), list(vocabulary), n=1, cutoff=SUGGESTION_CUTOFF)
        hint = f'did you mean "{suggestion[0]}"?' if suggestion else hint
        raise ScheduleError(f'Could not read "{self.text}": "{word}" is not understood ({hint}). {examples}')

    def end(self, hint: str, examples: str = EXAMPLES) -> None:
        if self.peek() is None:
            return
        if self.take("") == "in":  # a well-formed " in <zone>" was taken off already (``_split``)
            self.take("a time zone", 'a zone, e.g. "in Europe/Oslo"')
            raise ScheduleError(f'Could not read "{self.text}": a time zone is one name with no spaces, '
                                f'e.g. "in America/New_York". {examples}')
        self.not_understood(hint, examples=examples)


def _read(text: str, expression: str) -> IntervalSchedule | _WallClock | _Cron:
    """What ``expression`` says, before any zone is looked for (``text``: the schedule as typed)."""
    fields = expression.split(" ")
    words = [word for word in fields if re.fullmatch(r"[a-z]{4,}", word.lower())]  # cron has none ("mon-fri")
    if re.fullmatch(r"[\d*,/\-]+", fields[0]) and (len(fields) == CRON_FIELDS or not words):
        if len(fields) != CRON_FIELDS:
            raise ScheduleError(f'Could not read "{text}": a cron expression has five fields (minute hour '
                                f"day-of-month month day-of-week), not {len(fields)}. {CRON_EXAMPLES}")
        return _Cron(expression.lower())
    reader = _Reader(text, expression)
    if reader.take("a schedule") != "every":
        try:  # "5 minutes", "day at 09:00": "every" was left out
            _read(text, f"every {expression}")
            hint = f'did you mean "every {expression}"?'
        except ScheduleError:
            hint = 'expected "every" or a cron expression'
        reader.not_understood(hint, ["every"])
    word = reader.take("something", 'a number, "minute", "hour", "day", "weekday", "weekend" or a day of the week')
    if word.isdigit() or word in ("minute", "hour"):
        return _interval(reader, word)
    if word in _DAY_SETS:
        days, label = _DAY_SETS[word], word
    elif word == "week":
        if reader.take("a day", '"on" and days, e.g. "every week on mon,thu"') != "on":
            reader.not_understood('expected "on" and days, e.g. "every week on mon,thu"')
        names, days = _day_list(reader, reader.take("a day", 'a day of the week, e.g. "mon"'))
        label = f"week on {names}"
    elif word in DAY_NUMBERS:
        label, days = _day_list(reader, word)
    else:
        reader.not_understood('expected a number, "minute", "hour", "day", "weekday", "weekend" or a day of the week',
                              _AFTER_EVERY)
    if reader.take("a time", '"at" and a time', TIME_EXAMPLES) != "at":
        reader.not_understood('expected "at" and a time', ["at"], TIME_EXAMPLES)
    hour, minute, written = _time(reader)
    reader.end('the schedule ends after the time, or goes on with "in" and a time zone')
    return _WallClock(cron=f"{minute} {hour} * * {days}", normalized=f"every {label} at {written}")


def _interval(reader: _Reader, word: str) -> IntervalSchedule:
    count = 1 if word in ("minute", "hour") else int(word)
    if count == 0:
        reader.not_understood("an interval is at least 1", examples=INTERVAL_EXAMPLES)
    unit = word if not word.isdigit() else reader.take("a unit", '"minutes" or "hours"', INTERVAL_EXAMPLES)
    if unit not in ("minute", "minutes", "hour", "hours"):
        units = ["minute", "hour"] if count == 1 else ["minutes", "hours"]
        reader.not_understood('expected "minutes" or "hours"', units, INTERVAL_EXAMPLES)
    if word.isdigit() and count == 1 and unit.endswith("s"):
        raise ScheduleError(f'Use singular unit for "{reader.text}"')
    if count != 1 and not unit.endswith("s"):
        raise ScheduleError(f'Use plural unit for "{reader.text}"')
    reader.end("an interval schedule ends after its unit", INTERVAL_EXAMPLES)
    return IntervalSchedule(seconds=count * (3600 if unit.startswith("hour") else 60),
                            normalized=f"every {count} {unit}")


def _day_list(reader: _Reader, first: str) -> tuple[str, str]:
    """Days from ``first`` on ("mon,thu", "tuesday and friday"): their names and cron field."""
    names, numbers = [first], []
    while True:
        name = names[-1]
        if name not in DAY_NUMBERS:
            suggestion = get_close_matches(name, _DAY_NAMES, n=1, cutoff=SUGGESTION_CUTOFF)
            hint = f' (did you mean "{suggestion[0]}"?)' if suggestion else ' (days: "mon" or "monday" ... "sun")'
            raise ScheduleError(f'Invalid schedule day "{reader.words[reader.at - 1]}"{hint}. {EXAMPLES}')
        if DAY_NUMBERS[name] in numbers:
            raise ScheduleError(f'Duplicate schedule day "{name}"')
        numbers.append(DAY_NUMBERS[name])
        if reader.peek() not in (",", "and"):
            return ",".join(names), ",".join(map(str, numbers))
        separator = reader.take("")
        if separator == "," and reader.peek() == "and":
            separator = reader.take("")
        day = reader.take("a day", 'a day of the week, e.g. "mon"')
        if day in (",", "and", "at"):
            raise ScheduleError(f'Could not read "{reader.text}": a day is missing after "{separator}". {EXAMPLES}')
        names.append(day)


def _time(reader: _Reader) -> tuple[int, int, str]:
    """The time after "at" ("09:00", "9:00", "9am", "9:30 pm"): hour, minute, and as HH:MM."""
    value = reader.take("a time", examples=TIME_EXAMPLES)
    if reader.peek() in ("am", "pm"):
        value = f"{reader.words[reader.at - 1]} {reader.take('')}"
    typed = value
    value = value.lower().replace(" ", "")
    hour = minute = -1
    if match := _TIME_24.match(value):
        hour, minute = int(match.group(1)), int(match.group(2))
    elif (match := _TIME_12.match(value)) and 1 <= int(match.group(1)) <= 12:
        hour = int(match.group(1)) % 12 + (12 if match.group(3) == "pm" else 0)
        minute = int(match.group(2) or 0)
    if not 0 <= hour <= 23:
        raise ScheduleError(f'Invalid schedule time "{typed}": use HH:MM (00:00 to 23:59), 9am or 9:30pm. '
                            f"{TIME_EXAMPLES}")
    return hour, minute, f"{hour:02d}:{minute:02d}"


def _split(raw: str) -> tuple[str, str, str | None]:
    """The schedule as typed (whitespace collapsed), its expression, and the zone it names ("in …"), as typed."""
    text = re.sub(r"\s+", " ", raw.strip())
    inline = _INLINE_TIMEZONE.match(text)
    return (text, inline.group(1), inline.group(2)) if inline else (text, text, None)


def check_expression(raw: str) -> str:
    """``raw``'s expression read without its zone: its normalized form, or ``ScheduleError`` on a typo.

    Lets a form report a typo in the schedule and a bad zone field side by side.
    """
    text, expression, _zone = _split(raw)
    read = _read(text, expression)
    if isinstance(read, _Cron):
        return _cron(read.expression, "UTC").normalized
    return read.normalized


def parse(raw: str, *, timezone: str | None = None, default_timezone: str | None = None) -> Schedule:
    """The schedule ``raw`` names, or ``ScheduleError`` saying what is wrong.

    The grammar, after trimming and collapsing whitespace, in any case::

        interval  := "every " N (" minute" | " minutes" | " hour" | " hours")   N ≥ 1, singular iff N == 1
                   | "every minute" | "every hour"
        wallclock := "every " DAYS " at " TIME
        DAYS      := "day" | "weekday" | "weekend" | "week on " DAYLIST | DAYLIST
        DAYLIST   := DAY (("," | " and ") DAY)*                                  DAY: sun|sunday|mon|monday|...
        TIME      := H:MM | HH:MM (24-hour) | H[:MM]am | H[:MM]pm                 "9am", "9:30 pm", "21:30"
        schedule  := interval | wallclock [" in " IANA_TZ] | cron [" in " IANA_TZ]

    ``schedule_every()`` makes sub-minute intervals directly.

    The expression is read first (a typo is reported whatever the zones), then its zone:
    ``raw``'s own "in …", else ``timezone`` (the task's, an operator's choice), else
    ``default_timezone`` (the agent's ``get_default_timezone()``).
    """
    text, expression, inline_timezone = _split(raw)
    read = _read(text, expression)
    if inline_timezone and timezone and validate_timezone(inline_timezone) != validate_timezone(timezone):
        raise ScheduleError(f'Schedule timezone "{inline_timezone}" does not match task timezone "{timezone}"')
    if isinstance(read, IntervalSchedule):
        if inline_timezone or timezone:
            raise ScheduleError("Interval schedules cannot specify a timezone")
        return read
    if isinstance(read, _Cron):
        return _cron(read.expression, validate_timezone(inline_timezone or timezone or default_timezone or "UTC"))
    zone = inline_timezone or timezone or default_timezone
    if not zone:
        raise ScheduleError(f'Wall-clock schedule "{text}" requires a timezone or get_default_timezone(): add '
                            f'one, e.g. "{text} in Europe/Oslo"')
    return CalendarSchedule(cron=read.cron, timezone=validate_timezone(zone), normalized=read.normalized)


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


def next_occurrences(schedule: Schedule, now: datetime, count: int = 3) -> list[datetime]:
    """The next ``count`` runs after ``now`` of a schedule starting now (what a form previews)."""
    moments: list[datetime] = []
    for _ in range(count):
        moments.append(next_occurrence(schedule, moments[-1] if moments else now,
                                       previous=moments[-1] if moments else None))
    return moments


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
