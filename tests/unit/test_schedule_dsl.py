"""The schedule language: every grammar rule and error message, cron, next occurrences across DST
changes (Europe/Oslo, America/New_York), missed slots, occurrence keys.

Pure: ``agents_app.schedules.language`` imports no Django.
"""

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from agents_app.schedules import language as dsl
from agents_app.schedules.language import CalendarSchedule, IntervalSchedule, ScheduleError

OSLO = ZoneInfo("Europe/Oslo")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def error_of(raw: str, **kwargs: str | None) -> str:
    with pytest.raises(ScheduleError) as caught:
        dsl.parse(raw, **kwargs)
    return str(caught.value)


# --------------------------------------------------------------------------------- grammar
@pytest.mark.parametrize(("raw", "seconds", "normalized"), [
    ("every 1 minute", 60, "every 1 minute"),
    ("every 15 minutes", 900, "every 15 minutes"),
    ("every 1 hour", 3600, "every 1 hour"),
    ("every 2 hours", 7200, "every 2 hours"),
    ("  Every   10\tMINUTES ", 600, "every 10 minutes"),
])
def test_interval_schedules(raw: str, seconds: int, normalized: str) -> None:
    assert dsl.parse(raw) == IntervalSchedule(seconds=seconds, normalized=normalized)


@pytest.mark.parametrize(("raw", "cron", "normalized"), [
    ("every day at 09:00", "0 9 * * *", "every day at 09:00"),
    ("every day at 00:00", "0 0 * * *", "every day at 00:00"),
    ("every day at 23:59", "59 23 * * *", "every day at 23:59"),
    ("every weekday at 08:30", "30 8 * * 1-5", "every weekday at 08:30"),
    ("every week on mon,thu at 07:00", "0 7 * * 1,4", "every week on mon,thu at 07:00"),
    ("every week on Monday, THURSDAY at 07:00", "0 7 * * 1,4", "every week on monday,thursday at 07:00"),
    ("every week on sun at 07:00", "0 7 * * 0", "every week on sun at 07:00"),
    ("every week on tue,wed,fri,sat at 18:05", "5 18 * * 2,3,5,6", "every week on tue,wed,fri,sat at 18:05"),
])
def test_wall_clock_schedules_are_cron_expressions_in_a_zone(raw: str, cron: str, normalized: str) -> None:
    assert dsl.parse(raw, timezone="UTC") == CalendarSchedule(cron=cron, timezone="UTC", normalized=normalized)


def test_every_day_name_long_and_short() -> None:
    for name, number in dsl.DAY_NUMBERS.items():
        assert dsl.parse(f"every week on {name} at 06:00", timezone="UTC").cron == f"0 6 * * {number}"


def test_inline_time_zone_is_matched_case_insensitively_and_spelt_canonically() -> None:
    parsed = dsl.parse("every weekday at 08:30 in europe/oslo")
    assert parsed == CalendarSchedule(cron="30 8 * * 1-5", timezone="Europe/Oslo", normalized="every weekday at 08:30")


def test_time_zone_precedence_inline_then_task_then_default() -> None:
    assert dsl.parse("every day at 09:00 in Asia/Tokyo", default_timezone="UTC").timezone == "Asia/Tokyo"
    assert dsl.parse("every day at 09:00", timezone="Europe/Oslo", default_timezone="UTC").timezone == "Europe/Oslo"
    assert dsl.parse("every day at 09:00", default_timezone="America/New_York").timezone == "America/New_York"
    # The same zone twice, spelt differently, is no conflict.
    assert dsl.parse("every day at 09:00 in EUROPE/OSLO", timezone="Europe/Oslo").timezone == "Europe/Oslo"


def test_cron_expressions_with_or_without_a_zone() -> None:
    assert dsl.parse("0 9 * * 1-5") == CalendarSchedule(cron="0 9 * * 1-5", timezone="UTC", normalized="0 9 * * 1-5",
                                                        kind="cron")
    assert dsl.parse("*/5 * * * *", timezone="Europe/Oslo").timezone == "Europe/Oslo"
    assert dsl.parse("30 6 * * MON-FRI in America/New_York").timezone == "America/New_York"
    assert dsl.parse("0 9 * * *", default_timezone="Asia/Tokyo").timezone == "Asia/Tokyo"


# --------------------------------------------------------------------------------- the common forms
@pytest.mark.parametrize(("raw", "cron", "normalized"), [
    ("every monday at 09:00", "0 9 * * 1", "every monday at 09:00"),
    ("every Mon, Thu at 07:00", "0 7 * * 1,4", "every mon,thu at 07:00"),
    ("every tuesday and friday at 17:15", "15 17 * * 2,5", "every tuesday,friday at 17:15"),
    ("every weekend at 10:00", "0 10 * * 0,6", "every weekend at 10:00"),
    ("every day at 9am", "0 9 * * *", "every day at 09:00"),
    ("every day at 9 AM", "0 9 * * *", "every day at 09:00"),
    ("every weekday at 9:30pm", "30 21 * * 1-5", "every weekday at 21:30"),
    ("every day at 12am", "0 0 * * *", "every day at 00:00"),
    ("every day at 12:05pm", "5 12 * * *", "every day at 12:05"),
    ("every day at 9:00", "0 9 * * *", "every day at 09:00"),
    ("every week on sat at 6am", "0 6 * * 6", "every week on sat at 06:00"),
])
def test_weekdays_and_12_hour_times(raw: str, cron: str, normalized: str) -> None:
    assert dsl.parse(raw, timezone="UTC") == CalendarSchedule(cron=cron, timezone="UTC", normalized=normalized)


@pytest.mark.parametrize(("raw", "seconds", "normalized"), [
    ("every minute", 60, "every 1 minute"),
    ("every hour", 3600, "every 1 hour"),
    ("every 05 minutes", 300, "every 5 minutes"),
])
def test_interval_shorthands(raw: str, seconds: int, normalized: str) -> None:
    assert dsl.parse(raw) == IntervalSchedule(seconds=seconds, normalized=normalized)


# --------------------------------------------------------------------------------- errors (exact)
TRY = 'Try "every day at 09:00" or "every monday at 9am in Europe/Oslo".'
TRY_INTERVAL = 'Try "every 15 minutes" or "every 2 hours".'
TRY_TIME = 'Try "every day at 09:00" or "every day at 9:30pm".'


@pytest.mark.parametrize(("raw", "kwargs", "message"), [
    ("every 1 minutes", {}, 'Use singular unit for "every 1 minutes"'),
    ("every 1 hours", {}, 'Use singular unit for "every 1 hours"'),
    ("every 5 minute", {}, 'Use plural unit for "every 5 minute"'),
    ("Every 2 Hour", {}, 'Use plural unit for "Every 2 Hour"'),
    ("every 5 minutes in Europe/Oslo", {}, "Interval schedules cannot specify a timezone"),
    ("every 5 minutes", {"timezone": "UTC"}, "Interval schedules cannot specify a timezone"),
    ("every day at 09:00", {}, 'Wall-clock schedule "every day at 09:00" requires a timezone or '
                               'get_default_timezone(): add one, e.g. "every day at 09:00 in Europe/Oslo"'),
    ("Every  Weekday at 8am", {}, 'Wall-clock schedule "Every Weekday at 8am" requires a timezone or '
                                  'get_default_timezone(): add one, e.g. "Every Weekday at 8am in Europe/Oslo"'),
    ("every day at 24:00", {"timezone": "UTC"}, f'Invalid schedule time "24:00": use HH:MM (00:00 to 23:59), '
                                                f"9am or 9:30pm. {TRY_TIME}"),
    ("every weekday at 29:10", {"timezone": "UTC"}, f'Invalid schedule time "29:10": use HH:MM (00:00 to 23:59), '
                                                    f"9am or 9:30pm. {TRY_TIME}"),
    ("every week on mon at 13pm", {"timezone": "UTC"}, f'Invalid schedule time "13pm": use HH:MM (00:00 to 23:59), '
                                                       f"9am or 9:30pm. {TRY_TIME}"),
    ("every day at nine", {"timezone": "UTC"}, f'Invalid schedule time "nine": use HH:MM (00:00 to 23:59), '
                                               f"9am or 9:30pm. {TRY_TIME}"),
    ("every day", {"timezone": "UTC"}, f'Could not read "every day": a time is missing after "day" '
                                       f'(expected "at" and a time). {TRY_TIME}'),
    ("every day at", {"timezone": "UTC"}, f'Could not read "every day at": a time is missing after "at". {TRY_TIME}'),
    ("every 0 minutes", {}, f'Could not read "every 0 minutes": "0" is not understood (an interval is at least 1). '
                            f"{TRY_INTERVAL}"),
    ("every 15 mins", {}, f'Could not read "every 15 mins": "mins" is not understood (did you mean "minutes"?). '
                          f"{TRY_INTERVAL}"),
    ("every 15", {}, f'Could not read "every 15": a unit is missing after "15" (expected "minutes" or "hours"). '
                     f"{TRY_INTERVAL}"),
    ("every month at 09:00", {"timezone": "UTC"},
     f'Could not read "every month at 09:00": "month" is not understood (expected a number, "minute", "hour", '
     f'"day", "weekday", "weekend" or a day of the week). {TRY}'),
    ("every fortnight", {"timezone": "UTC"},
     f'Could not read "every fortnight": "fortnight" is not understood (expected a number, "minute", "hour", '
     f'"day", "weekday", "weekend" or a day of the week). {TRY}'),
    ("daily at nine", {}, f'Could not read "daily at nine": "daily" is not understood (expected "every" or a cron '
                          f"expression). {TRY}"),
    ("every day at 09:00 on mondays", {"timezone": "UTC"},
     f'Could not read "every day at 09:00 on mondays": "on" is not understood (the schedule ends after the time, '
     f'or goes on with "in" and a time zone). {TRY}'),
    ("5 minutes", {}, f'Could not read "5 minutes": "5" is not understood (did you mean "every 5 minutes"?). {TRY}'),
    ("Monday at 9am", {"timezone": "UTC"}, 'Could not read "Monday at 9am": "Monday" is not understood (did you mean '
                                           f'"every Monday at 9am"?). {TRY}'),
    ("every day at 09:00 in Mars/Olympus", {}, 'Invalid timezone "Mars/Olympus"'),
    ("every day at 09:00 in Europe/Olso", {}, 'Invalid timezone "Europe/Olso"; did you mean "Europe/Oslo"?'),
    ("every day at 09:00", {"timezone": "Mars/Olympus"}, 'Invalid timezone "Mars/Olympus"'),
    ("every day at 09:00", {"timezone": "america/new_yrok"},
     'Invalid timezone "america/new_yrok"; did you mean "America/New_York"?'),
    ("every day at 09:00", {"timezone": "Oslo"}, 'Invalid timezone "Oslo"; did you mean "Europe/Oslo"?'),
    ("every day at 09:00", {"default_timezone": "Nowhere"}, 'Invalid timezone "Nowhere"'),
    ("every day at 09:00 in Europe/Oslo", {"timezone": "UTC"},
     'Schedule timezone "Europe/Oslo" does not match task timezone "UTC"'),
    ("every week on funday at 07:00", {"timezone": "UTC"},
     f'Invalid schedule day "funday" (did you mean "sunday"?). {TRY}'),
    ("every week on mon, ,tue at 07:00", {"timezone": "UTC"},
     f'Could not read "every week on mon, ,tue at 07:00": a day is missing after ",". {TRY}'),
    ("every week on mon,monday at 07:00", {"timezone": "UTC"}, 'Duplicate schedule day "monday"'),
    ("every fri,fri at 07:00", {"timezone": "UTC"}, 'Duplicate schedule day "fri"'),
    ("0 9 * *", {}, 'Could not read "0 9 * *": a cron expression has five fields (minute hour day-of-month month '
                    'day-of-week), not 4. Try "0 9 * * 1-5" or "*/15 * * * *".'),
    ("61 * * * *", {}, 'Invalid cron expression "61 * * * *": Bad minute'),
    ("0 9 * * 8", {}, 'Invalid cron expression "0 9 * * 8": Bad day-of-week'),
    ("0 0 30 2 *", {}, 'Invalid cron expression "0 0 30 2 *": Bad day-of-month'),
])
def test_error_messages(raw: str, kwargs: dict[str, str], message: str) -> None:
    assert error_of(raw, **kwargs) == message


@pytest.mark.parametrize("zone", [{}, {"timezone": "Europe/Oslo"}, {"default_timezone": "UTC"}])
def test_a_typo_is_reported_as_a_typo_with_or_without_a_zone(zone: dict[str, str]) -> None:
    """The expression is read before its zone is looked for: "evry" is the fault, not a missing zone."""
    assert error_of("evry day at 09:00", **zone) == (
        f'Could not read "evry day at 09:00": "evry" is not understood (did you mean "every"?). {TRY}')


def test_every_example_in_an_error_is_valid() -> None:
    for example in re.findall(r'"([^"]+)"', TRY + TRY_INTERVAL + TRY_TIME + dsl.CRON_EXAMPLES):
        dsl.parse(example, default_timezone="UTC")


def test_task_ids() -> None:
    assert dsl.validate_task_id("daily-report_2") == "daily-report_2"
    for bad in ("", "daily report", "a/b", "rapport:é"):
        with pytest.raises(ScheduleError, match=r'^Invalid scheduled task id ".*"; use letters, numbers, "_" or "-"$'):
            dsl.validate_task_id(bad)


def test_time_zone_names() -> None:
    names = dsl.timezone_names()
    assert {"UTC", "Europe/Oslo", "America/New_York", "America/Argentina/Buenos_Aires"} <= set(names)
    assert names == sorted(names)
    assert dsl.validate_timezone("america/new_york") == "America/New_York"


def test_the_zones_offered_are_places_and_utc_only() -> None:
    """No ``Factory``, ``localtime``, ``posixrules``, ``Etc/GMT+5``, ``EST5EDT`` or ``US/Eastern`` in the list;
    names from the old lists are still understood when typed (a stored schedule may use one)."""
    names = dsl.timezone_names()
    areas = {"Africa", "America", "Antarctica", "Arctic", "Asia", "Atlantic", "Australia", "Europe", "Indian",
             "Pacific"}
    assert [name for name in names if name != "UTC" and name.split("/")[0] not in areas] == []
    assert len(names) > 300
    assert dsl.validate_timezone("US/Eastern") == "US/Eastern"
    for odd in ("Factory", "localtime", "posixrules"):
        with pytest.raises(ScheduleError, match=f'^Invalid timezone "{odd}"'):
            dsl.validate_timezone(odd)


# --------------------------------------------------------------------------------- next occurrence
def test_interval_next_runs_count_from_the_previous_occurrence_and_skip_missed_ones() -> None:
    every_15 = dsl.parse("every 15 minutes")
    now = utc(2026, 5, 4, 10, 7, 33)
    assert dsl.next_occurrence(every_15, now) == now + timedelta(minutes=15)
    previous = utc(2026, 5, 4, 10, 0)
    assert dsl.next_occurrence(every_15, utc(2026, 5, 4, 10, 0, 1), previous) == utc(2026, 5, 4, 10, 15)
    # Down for three hours: the next one is the first slot after now, not the first missed one.
    assert dsl.next_occurrence(every_15, utc(2026, 5, 4, 13, 5), previous) == utc(2026, 5, 4, 13, 15)
    # Exactly on a slot: that slot is now, the next one comes after it.
    assert dsl.next_occurrence(every_15, utc(2026, 5, 4, 13, 15), previous) == utc(2026, 5, 4, 13, 30)


def test_wall_clock_next_runs_in_the_zone() -> None:
    daily = dsl.parse("every day at 09:00 in Europe/Oslo")
    assert dsl.next_occurrence(daily, utc(2026, 1, 10, 7, 59)) == utc(2026, 1, 10, 8, 0)  # CET: UTC+1
    assert dsl.next_occurrence(daily, utc(2026, 1, 10, 8, 0)) == utc(2026, 1, 11, 8, 0)
    assert dsl.next_occurrence(daily, utc(2026, 7, 10, 6, 0)) == utc(2026, 7, 10, 7, 0)  # CEST: UTC+2


def test_weekday_and_weekly_skip_the_other_days() -> None:
    weekday = dsl.parse("every weekday at 08:30", timezone="UTC")
    friday_evening = utc(2026, 5, 8, 20, 0)
    assert dsl.next_occurrence(weekday, friday_evening) == utc(2026, 5, 11, 8, 30)  # Monday
    weekly = dsl.parse("every week on mon,thu at 07:00", timezone="UTC")
    assert dsl.next_occurrence(weekly, utc(2026, 5, 4, 7, 0)) == utc(2026, 5, 7, 7, 0)  # Monday → Thursday
    assert dsl.next_occurrence(weekly, utc(2026, 5, 7, 7, 0)) == utc(2026, 5, 11, 7, 0)  # Thursday → Monday


def occurrences(schedule: dsl.Schedule, start: datetime, count: int) -> list[datetime]:
    out, now = [], start
    for _ in range(count):
        now = dsl.next_occurrence(schedule, now)
        out.append(now)
    return out


def test_spring_forward_in_oslo() -> None:
    """2026-03-29 02:00 CET → 03:00 CEST: 02:30 does not exist that night and runs at 03:00; the
    daily 09:00 moves from 08:00 to 07:00 UTC."""
    skipped = dsl.parse("every day at 02:30 in Europe/Oslo")
    assert [t.astimezone(OSLO).isoformat() for t in occurrences(skipped, utc(2026, 3, 27, 12), 4)] == [
        "2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    nine = dsl.parse("every day at 09:00 in Europe/Oslo")
    assert occurrences(nine, utc(2026, 3, 28, 9), 2) == [utc(2026, 3, 29, 7), utc(2026, 3, 30, 7)]
    assert [t.astimezone(OSLO).hour for t in occurrences(nine, utc(2026, 3, 27, 9), 3)] == [9, 9, 9]


def test_fall_back_in_oslo() -> None:
    """2026-10-25 03:00 CEST → 02:00 CET: 02:30 happens twice that night and runs once, at the first."""
    twice = dsl.parse("every day at 02:30 in Europe/Oslo")
    assert occurrences(twice, utc(2026, 10, 24, 12), 3) == [
        utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30),
    ]
    # Asked during the second 02:30 (after the first ran), the next is the following night.
    assert dsl.next_occurrence(twice, utc(2026, 10, 25, 1, 30)) == utc(2026, 10, 26, 1, 30)
    nine = dsl.parse("every day at 09:00 in Europe/Oslo")
    assert occurrences(nine, utc(2026, 10, 24, 9), 2) == [utc(2026, 10, 25, 8), utc(2026, 10, 26, 8)]


def test_spring_forward_in_new_york() -> None:
    """2026-03-08 02:00 EST → 03:00 EDT: 02:30 runs at 03:00 EDT; weekday 08:30 keeps its wall time."""
    skipped = dsl.parse("every day at 02:30 in America/New_York")
    assert [t.astimezone(NEW_YORK).isoformat() for t in occurrences(skipped, utc(2026, 3, 7, 12), 3)] == [
        "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00",
    ]
    weekday = dsl.parse("every weekday at 08:30 in America/New_York")
    assert occurrences(weekday, utc(2026, 3, 6, 14), 2) == [utc(2026, 3, 9, 12, 30), utc(2026, 3, 10, 12, 30)]
    assert dsl.next_occurrence(weekday, utc(2026, 3, 5, 14)) == utc(2026, 3, 6, 13, 30)  # before: EST


def test_fall_back_in_new_york() -> None:
    """2026-11-01 02:00 EDT → 01:00 EST: 01:30 happens twice and runs once, at the first (EDT)."""
    twice = dsl.parse("every day at 01:30 in America/New_York")
    assert occurrences(twice, utc(2026, 10, 31, 12), 3) == [
        utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30), utc(2026, 11, 3, 6, 30),
    ]
    assert dsl.next_occurrence(twice, utc(2026, 11, 1, 6, 0)) == utc(2026, 11, 2, 6, 30)  # during the second 01:30


def test_interval_schedules_ignore_dst() -> None:
    hourly = dsl.parse("every 1 hour")
    start = utc(2026, 3, 29, 0, 0)
    assert dsl.next_occurrence(hourly, utc(2026, 3, 29, 1, 0), start) == utc(2026, 3, 29, 2, 0)


def test_the_next_three_runs() -> None:
    now = utc(2026, 5, 8, 20, 0)  # a Friday
    weekday = dsl.parse("every weekday at 9am in Europe/Oslo")
    assert dsl.next_occurrences(weekday, now) == [utc(2026, 5, 11, 7), utc(2026, 5, 12, 7), utc(2026, 5, 13, 7)]
    assert dsl.next_occurrences(dsl.parse("every 2 hours"), now) == [utc(2026, 5, 8, 22), utc(2026, 5, 9, 0),
                                                                    utc(2026, 5, 9, 2)]
    assert dsl.next_occurrences(dsl.parse("every weekend at 10:00", timezone="UTC"), now, count=2) == [
        utc(2026, 5, 9, 10), utc(2026, 5, 10, 10)]


def test_specs_round_trip() -> None:
    for schedule in (dsl.parse("every 5 minutes"), dsl.parse("every day at 09:00 in Europe/Oslo"),
                     dsl.parse("0 9 * * 1-5"), IntervalSchedule(seconds=5, normalized="every 5 seconds")):
        assert dsl.from_spec(dsl.to_spec(schedule)) == schedule


# --------------------------------------------------------------------------------- occurrences
def test_occurrence_and_idempotency_keys() -> None:
    at = utc(2026, 5, 4, 7, 0)
    assert dsl.occurrence_key("daily_report", at) == "daily_report:1777878000000"
    context = dsl.ScheduledTaskContext.of("daily_report", "demo-agent/shop-1", at, "every day at 09:00", "wall-clock",
                                          timezone="Europe/Oslo", metadata={"team": "ops"})
    assert (context.scheduled_for, context.occurrence_key, context.idempotency_key) == (
        1777878000000, "daily_report:1777878000000", "think-schedule:demo-agent/shop-1:daily_report:1777878000000")
    assert context.message_metadata() == {
        "team": "ops", "source": "schedule", "schedule": "daily_report", "occurrence": "daily_report:1777878000000",
        "scheduledFor": 1777878000000, "idempotencyKey": context.idempotency_key,
    }


def test_scheduled_occurrence_of_a_transcript() -> None:
    context = dsl.ScheduledTaskContext.of("t", "a/b", utc(2026, 1, 1), "every 1 hour", "interval")
    scheduled = {"role": "user", "parts": [], "metadata": context.message_metadata()}
    typed = {"role": "user", "parts": []}
    reply = {"role": "assistant", "parts": []}
    assert dsl.scheduled_occurrence([typed, scheduled, reply])["idempotencyKey"] == context.idempotency_key
    assert dsl.scheduled_occurrence([scheduled, reply, typed]) is None
    assert dsl.scheduled_occurrence([]) is None
