"""Scheduled prompts in one process (docs/architecture.md#schedules; ``agents_app.schedules``): claims, runs as turns,
missed occurrences, failures, code declarations and the agent scheduling API.

``AGENT_SCHEDULE_RUNS = "inline"`` (the test settings): a claimed run runs in the call that claimed
it, where a deployment hands it to a Celery worker. The races between processes are in
``tests/crossprocess/test_schedules_processes.py``.
"""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import override_settings
from django.utils import timezone

from agents_app import events, transcript
from agents_app.checks import E006, check_scheduled_tasks
from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance, Schedule, ScheduleRun, Turn
from agents_app.schedules import declared, definitions, runs
from agents_app.schedules import language as dsl
from tests.agents import CHARGES, SCHEDULE_CALLS, ScheduledAgent
from tests.support.events import names
from tests.support.frames import message_text

pytestmark = pytest.mark.django_db(transaction=True)

DAILY_REPORT = {"schedule": "every day at 09:00", "timezone": "UTC", "prompt": "Generate the daily report."}

@pytest.fixture(autouse=True)
def fresh_agent() -> Iterator[None]:
    SCHEDULE_CALLS.clear()
    CHARGES.clear()
    yield
    ScheduledAgent.TASKS = {}
    ScheduledAgent.DEFAULT_TIMEZONE = None


@pytest.fixture
def make_schedule(user: Any) -> Any:
    """An operator's schedule, saved as the admin saves it (by ``user``)."""

    @database_sync_to_async
    def make(name: str, instance: str, prompt: str, schedule: str, tz: str = "", *, agent: str = "demo-agent",
             due: datetime | None = None) -> Schedule:
        """``due``: move its next run there (as if time had passed)."""
        parsed, problems = definitions.check_definition(agent, instance, name, schedule, tz)
        assert not problems
        row = definitions.save_operator_schedule(Schedule(name=name, prompt=prompt, schedule=schedule, timezone=tz),
                                               agent, instance, parsed, user)
        if due is not None:
            Schedule.objects.filter(pk=row.pk).update(next_run_at=due)
        return Schedule.objects.select_related("instance").get(pk=row.pk)

    return make


@database_sync_to_async
def reload(row: Schedule) -> Schedule:
    return Schedule.objects.select_related("last_run", "instance").get(pk=row.pk)


@database_sync_to_async
def runs_of(row: Schedule) -> list[ScheduleRun]:
    return list(ScheduleRun.objects.filter(schedule=row).order_by("scheduled_for", "pk"))


@database_sync_to_async
def messages_of(instance: AgentInstance) -> list[dict[str, Any]]:
    return transcript.load(instance)


# --------------------------------------------------------------------------------- prompt runs
async def test_a_due_prompt_runs_once_as_a_turn_whose_message_is_marked_as_the_schedules(user, emitted, make_schedule):
    created = timezone.now()
    row = await make_schedule("daily-report", "shop-1", "Generate the daily report.",
                                  "every day at 09:00 in Europe/Oslo")
    oslo_nine = dsl.next_occurrence(dsl.parse("every day at 09:00 in Europe/Oslo"), created)
    assert row.next_run_at == oslo_nine
    assert row.spec == {"kind": "wall-clock", "cron": "0 9 * * *", "timezone": "Europe/Oslo",
                        "normalized": "every day at 09:00"}
    assert await runs.tick(now=oslo_nine - timedelta(seconds=1)) == {"claimed": 0, "resent": 0}

    assert await runs.tick(now=oslo_nine) == {"claimed": 1, "resent": 0}
    [run] = await runs_of(row)
    key = f"daily-report:{dsl.epoch_ms(oslo_nine)}"
    assert (run.status, run.occurrence_key, run.scheduled_for, run.trigger, run.error) == (
        "completed", key, oslo_nine, "schedule", "")
    prompt, reply = await messages_of(row.instance)
    assert (prompt["role"], message_text(prompt)) == ("user", "Generate the daily report.")
    assert prompt["metadata"] == {
        "source": "schedule", "schedule": "daily-report", "occurrence": key, "scheduledFor": dsl.epoch_ms(oslo_nine),
        "idempotencyKey": f"think-schedule:demo-agent/shop-1:{key}",
    }
    assert (reply["role"], message_text(reply)) == (
        "assistant", "(demo model, offline) You said: Generate the daily report.")
    turn = await Turn.objects.aget(instance=row.instance, request_id=run.request_id)
    assert (turn.kind, turn.status) == ("programmatic", "completed")

    row = await reload(row)
    assert (row.next_run_at, row.last_run_id, row.consecutive_failures) == (oslo_nine + timedelta(days=1), run.pk, 0)
    assert await runs.tick(now=oslo_nine + timedelta(minutes=1)) == {"claimed": 0, "resent": 0}
    assert len(await runs_of(row)) == 1
    execute = [data for name, data in emitted if name == events.SCHEDULE_EXECUTE]
    assert execute == [{"agent": "demo-agent", "name": "shop-1", "id": "daily-report", "callback": "prompt",
                        "occurrenceKey": key, "requestId": run.request_id}]
    assert events.SCHEDULE_CREATE in names(emitted)


async def test_an_occurrence_another_ticker_claimed_is_neither_run_nor_advanced_here(make_schedule):
    """The INSERT decides: this ticker sees the schedule due, but the occurrence's row exists."""
    now = timezone.now()
    row = await make_schedule("report", "claimed-elsewhere", "hi", "every 1 hour", due=now - timedelta(minutes=1))
    await ScheduleRun.objects.acreate(
        schedule=row, instance_id=row.instance_id, occurrence_key=dsl.occurrence_key("report", row.next_run_at),
        scheduled_for=row.next_run_at, request_id="other-ticker", claimed_at=now, attempted_at=now,
        status=ScheduleRun.Status.COMPLETED)
    due, won = await database_sync_to_async(runs.claim_due)(now=now)
    assert (due, won) == (1, [])
    assert (await reload(row)).next_run_at == row.next_run_at
    assert await Turn.objects.acount() == 0


async def test_a_run_task_delivered_twice_runs_once(make_schedule):
    now = timezone.now()
    row = await make_schedule("twice", "twice", "hello", "every 1 hour", due=now)
    # Claimed, not run (as a ticker claims before it hands over): the test plays the worker, twice.
    _, [run_id] = await database_sync_to_async(runs.claim_due)(now=now)
    assert await runs.execute(run_id) == "completed"
    assert await runs.execute(run_id) is None
    assert await Turn.objects.filter(instance_id=row.instance_id).acount() == 1
    assert [m["role"] for m in await messages_of(row.instance)] == ["user", "assistant"]


async def test_a_missed_interval_occurrence_runs_once_then_the_schedule_keeps_its_grid(make_schedule):
    """Everything was down for three hours: one run (stamped with the first missed slot), not twelve."""
    now = datetime(2026, 5, 4, 13, 5, tzinfo=UTC)
    first_missed = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
    row = await make_schedule("every-15", "missed", "status?", "every 15 minutes", due=first_missed)
    assert await runs.tick(now=now) == {"claimed": 1, "resent": 0}
    [run] = await runs_of(row)
    assert (run.scheduled_for, run.status) == (first_missed, "completed")
    assert (await reload(row)).next_run_at == datetime(2026, 5, 4, 13, 15, tzinfo=UTC)
    assert await runs.tick(now=now + timedelta(minutes=5)) == {"claimed": 0, "resent": 0}
    assert await runs.tick(now=datetime(2026, 5, 4, 13, 15, tzinfo=UTC)) == {"claimed": 1, "resent": 0}
    assert len(await runs_of(row)) == 2


async def test_a_missed_daily_occurrence_runs_once_and_the_next_is_tomorrows(make_schedule):
    now = datetime(2026, 5, 7, 12, 0, tzinfo=UTC)
    three_days_ago = datetime(2026, 5, 4, 7, 0, tzinfo=UTC)
    row = await make_schedule("daily", "missed-daily", "report", "every day at 09:00 in Europe/Oslo",
                                  due=three_days_ago)
    assert await runs.tick(now=now) == {"claimed": 1, "resent": 0}
    assert [r.scheduled_for for r in await runs_of(row)] == [three_days_ago]
    assert (await reload(row)).next_run_at == datetime(2026, 5, 8, 7, 0, tzinfo=UTC)


async def test_failures_are_counted_shown_and_emitted_and_a_success_resets_them(emitted, make_schedule):
    row = await make_schedule("flaky", "flaky", "/fail", "every 1 hour")
    first = await runs.run_now(row.pk)
    second = await runs.run_now(row.pk)
    assert [r.status for r in await runs_of(row)] == ["error", "error"]
    row = await reload(row)
    assert (row.consecutive_failures, row.last_run_id) == (2, second.pk)
    assert row.last_run.error  # the turn's error text, shown in the admin
    errors = [data for name, data in emitted if name == events.SCHEDULE_ERROR]
    assert [e["occurrenceKey"] for e in errors] == [first.occurrence_key, second.occurrence_key]
    assert errors[0]["status"] == "error" and errors[0]["error"] == row.last_run.error

    await Schedule.objects.filter(pk=row.pk).aupdate(prompt="all good")
    await runs.run_now(row.pk)
    assert (await reload(row)).consecutive_failures == 0


async def test_an_agent_class_that_is_gone_fails_the_run_visibly(emitted):
    instance = await AgentInstance.objects.acreate(slug="retired-agent", name="x")
    now = timezone.now()
    row = await Schedule.objects.acreate(name="old", instance=instance, prompt="hi", schedule="every 1 hour",
                                         spec=dsl.to_spec(dsl.parse("every 1 hour")), next_run_at=now)
    await runs.tick(now=now)
    [run] = await runs_of(row)
    assert (run.status, run.error) == ("failed", "No agent is registered under 'retired-agent'")
    assert (await reload(row)).consecutive_failures == 1
    [data] = [d for n, d in emitted if n == events.SCHEDULE_ERROR]
    assert data["error"] == "No agent is registered under 'retired-agent'"


async def test_run_now_runs_once_and_leaves_the_next_run_alone(user, make_schedule):
    row = await make_schedule("now", "run-now", "hello now", "every day at 07:00", "UTC")
    run = await runs.run_now(row.pk, actor=user)
    assert (run.trigger, run.triggered_by_id) == ("manual", user.pk)
    assert [r.status for r in await runs_of(row)] == ["completed"]
    assert (await reload(row)).next_run_at == row.next_run_at


async def test_a_paused_schedule_is_not_claimed_and_resumes_at_its_next_occurrence(make_schedule):
    now = timezone.now()
    row = await make_schedule("paused", "paused", "hello", "every 1 hour", due=now - timedelta(hours=5))
    assert await database_sync_to_async(definitions.set_enabled)([row.pk], False) == 1
    assert await runs.tick(now=now) == {"claimed": 0, "resent": 0}
    assert await database_sync_to_async(definitions.set_enabled)([row.pk], True, now=now) == 1
    row = await reload(row)
    assert (row.enabled, row.next_run_at) == (True, now + timedelta(hours=1))  # no catch-up run for the pause
    assert await runs.tick(now=now) == {"claimed": 0, "resent": 0}


async def test_changing_the_prompt_keeps_the_next_run_and_changing_the_schedule_moves_it(make_schedule):
    row = await make_schedule("edit", "edit", "v1", "every day at 09:00", "UTC")
    later = row.next_run_at - timedelta(hours=1)
    row.prompt = "v2"
    await database_sync_to_async(definitions.store)(row, dsl.parse("every day at 09:00", timezone="UTC"), now=later)
    assert (await reload(row)).next_run_at == row.next_run_at
    await database_sync_to_async(definitions.store)(row, dsl.parse("every day at 06:00", timezone="UTC"), now=later)
    assert (await reload(row)).next_run_at == dsl.next_occurrence(dsl.parse("0 6 * * *"), later)


# --------------------------------------------------------------------------------- lost runs
async def test_lost_runs_are_sent_again_or_settled_from_their_turn(make_schedule):
    now = timezone.now()
    old = now - timedelta(minutes=15, seconds=1)  # past AGENT_SCHEDULE_RUN_LEASE
    row = await make_schedule("lost", "lost", "hello", "every 1 hour")
    # A turn still running holds its instance: that run's schedule is on an instance of its own.
    busy = await make_schedule("busy", "busy", "hello", "every 1 hour")

    async def run(schedule: Schedule, key: str, status: str, request_id: str) -> ScheduleRun:
        return await ScheduleRun.objects.acreate(
            schedule=schedule, instance_id=schedule.instance_id, occurrence_key=key, scheduled_for=old,
            request_id=request_id, status=status, claimed_at=old, attempted_at=old)

    await run(row, "lost:1", "claimed", "req-1")
    await run(row, "lost:2", "running", "req-2")
    await Turn.objects.acreate(instance_id=row.instance_id, request_id="req-2", status="error", error="model down")
    await run(row, "lost:3", "running", "req-3")
    still_running = await run(busy, "busy:4", "running", "req-4")
    await Turn.objects.acreate(instance_id=busy.instance_id, request_id="req-4", status="running")
    fresh = await run(row, "lost:5", "claimed", "req-5")
    await ScheduleRun.objects.filter(pk=fresh.pk).aupdate(attempted_at=now)

    assert await runs.tick(now=now) == {"claimed": 0, "resent": 1}
    statuses = {r.occurrence_key: (r.status, r.error) async for r in ScheduleRun.objects.all()}
    assert statuses == {
        "lost:1": ("completed", ""),  # sent again, and run
        "lost:2": ("error", "model down"),
        "lost:3": ("failed", "The worker running it was lost before it finished."),
        "busy:4": ("running", ""),
        "lost:5": ("claimed", ""),
    }
    assert (await ScheduleRun.objects.aget(pk=still_running.pk)).attempted_at == now
    assert (await reload(row)).consecutive_failures == 0  # two failures, then the run sent again succeeded


# --------------------------------------------------------------------------------- declared in code
async def test_declared_tasks_follow_the_code_without_moving_or_repeating_runs(emitted):
    ScheduledAgent.TASKS = {"daily_report": DAILY_REPORT}
    handle = await ScheduledAgent.aget("shop-1")
    row = await Schedule.objects.aget(instance=handle.instance, name="daily_report")
    assert (row.source, row.action, row.prompt, row.spec["cron"], row.spec["timezone"]) == (
        "code", "prompt", "Generate the daily report.", "0 9 * * *", "UTC")
    first_next = row.next_run_at
    sync = database_sync_to_async(declared.sync_declared)

    assert await sync() == {"created": 0, "rescheduled": 0, "updated": 0, "deleted": 0, "invalid": 0}
    ScheduledAgent.TASKS = {"daily_report": {**DAILY_REPORT, "prompt": "Generate the daily report, briefly."}}
    assert (await sync())["updated"] == 1
    row = await reload(row)
    assert (row.prompt, row.next_run_at) == ("Generate the daily report, briefly.", first_next)

    # Due: runs once; syncing again, unchanged, neither moves nor repeats it.
    assert await runs.tick(now=first_next) == {"claimed": 1, "resent": 0}
    assert (await sync())["updated"] == 0
    assert await runs.tick(now=first_next) == {"claimed": 0, "resent": 0}
    [run] = await runs_of(row)
    assert run.status == "completed"
    assert message_text((await messages_of(handle.instance))[0]) == "Generate the daily report, briefly."

    ScheduledAgent.TASKS = {"daily_report": {**DAILY_REPORT, "schedule": "every day at 10:00"}}
    assert (await sync())["rescheduled"] == 1
    assert (await reload(row)).next_run_at.astimezone(UTC).hour == 10
    ScheduledAgent.TASKS = {}
    assert (await sync())["deleted"] == 1
    assert not await Schedule.objects.filter(instance=handle.instance).aexists()


async def test_a_declared_handler_gets_the_context_of_its_occurrence():
    ScheduledAgent.TASKS = {"digest": {"schedule": "every 2 hours", "handler": "report", "metadata": {"team": "ops"}}}
    handle = await ScheduledAgent.aget("handler")
    row = await Schedule.objects.aget(instance=handle.instance, name="digest")
    await runs.tick(now=row.next_run_at)
    [(method, _, ctx)] = SCHEDULE_CALLS["handler"]
    key = f"digest:{dsl.epoch_ms(row.next_run_at)}"
    assert (method, ctx.task_id, ctx.scheduled_for_date, ctx.occurrence_key, ctx.schedule, ctx.schedule_kind) == (
        "report", "digest", row.next_run_at, key, "every 2 hours", "interval")
    assert (ctx.idempotency_key, ctx.timezone, ctx.metadata) == (
        f"think-schedule:scheduled-agent/handler:{key}", None, {"team": "ops"})
    assert [r.status for r in await runs_of(row)] == ["completed"]


async def test_the_default_timezone_applies_and_a_task_no_longer_declared_is_skipped():
    ScheduledAgent.DEFAULT_TIMEZONE = "America/New_York"
    ScheduledAgent.TASKS = {"standup": {"schedule": "every weekday at 08:30", "prompt": "Standup notes?"}}
    handle = await ScheduledAgent.aget("tz")
    row = await Schedule.objects.aget(instance=handle.instance, name="standup")
    assert row.spec["timezone"] == "America/New_York"
    ScheduledAgent.TASKS = {}  # removed from the code, not yet synced
    await runs.run_now(row.pk)
    [run] = await runs_of(row)
    assert (run.status, run.error) == ("skipped", "No longer declared by get_scheduled_tasks().")


async def test_an_invalid_declaration_fails_the_system_check_and_leaves_rows_alone():
    assert check_scheduled_tasks(None) == []
    with override_settings(AGENT_CLASSES=["tests.agents.BadScheduleAgent"]):
        [error] = check_scheduled_tasks(None)
        assert error.id == E006
        assert error.msg == ('BadScheduleAgent (bad-schedule-agent): get_scheduled_tasks() of BadScheduleAgent: '
                             'Could not read "evry day at 09:00": "evry" is not understood (did you mean '
                             '"every"?). Try "every day at 09:00" or "every monday at 9am in Europe/Oslo".')
        await AgentInstance.objects.acreate(slug="bad-schedule-agent", name="x")  # no row, no exception
        assert (await database_sync_to_async(declared.sync_declared)())["invalid"] == 1
    ScheduledAgent.TASKS = {"both": {"schedule": "every 1 hour", "prompt": "p", "handler": "report"}}
    with pytest.raises(Exception, match='Scheduled task "both" must define exactly one of prompt or handler'):
        declared.declared_tasks(ScheduledAgent(AgentInstance(slug="scheduled-agent", name="x")))


# --------------------------------------------------------------------------------- the agent API
async def test_schedule_a_delay_runs_the_method_once_with_its_payload_then_it_is_gone(emitted):
    handle = await ScheduledAgent.aget("api")
    entry = await handle.schedule(0, "remember", {"note": "buy milk"})
    assert (entry.type, entry.callback, entry.payload, entry.delay_in_seconds) == (
        "delayed", "remember", {"note": "buy milk"}, 0)
    assert [e.id for e in await handle.get_schedules()] == [entry.id]
    await runs.tick(now=timezone.now() + timedelta(seconds=1))
    [(method, payload, ctx)] = SCHEDULE_CALLS["api"]
    assert (method, payload, ctx.task_id) == ("remember", {"note": "buy milk"}, entry.id)
    assert await handle.get_schedules() == []
    assert [d["id"] for n, d in emitted if n == events.SCHEDULE_CREATE] == [entry.id]


async def test_schedule_cron_and_every_are_idempotent_and_can_be_listed_and_cancelled():
    handle = await ScheduledAgent.aget("api2")
    cron = await handle.schedule("0 9 * * 1-5", "remember", {"k": 1}, timezone="Europe/Oslo")
    assert (await handle.schedule("0 9 * * 1-5", "remember", {"k": 1}, timezone="Europe/Oslo")).id == cron.id
    assert (cron.type, cron.cron) == ("cron", "0 9 * * 1-5")
    assert cron.time == dsl.next_occurrence(dsl.parse("0 9 * * 1-5 in Europe/Oslo"), timezone.now())
    every = await handle.schedule_every(30, "remember")
    assert (await handle.schedule_every(30, "remember")).id == every.id
    assert (every.type, every.interval_seconds) == ("interval", 30)
    at = timezone.now() + timedelta(days=1)
    one, two = await handle.schedule(at, "remember"), await handle.schedule(at, "remember")
    assert one.id != two.id and one.type == "scheduled" and one.time == at
    assert {e.id for e in await handle.get_schedules(type="cron")} == {cron.id}
    assert [e.id for e in await handle.get_schedules(id=every.id)] == [every.id]
    assert await handle.cancel_schedule(cron.id) is True
    assert await handle.cancel_schedule(cron.id) is False
    assert len(await handle.get_schedules()) == 3
    # Another instance's schedules are its own.
    assert await (await ScheduledAgent.aget("api3")).get_schedules() == []


async def test_schedule_refuses_what_it_cannot_run():
    handle = await ScheduledAgent.aget("api4")
    with pytest.raises(ValueError, match=r"ScheduledAgent\.no_such_method is not a method"):
        await handle.schedule(10, "no_such_method")
    with pytest.raises(ValueError, match="aware datetime"):
        await handle.schedule(datetime(2030, 1, 1), "remember")  # naive: refused
    with pytest.raises(ValueError, match="seconds ≥ 0"):
        await handle.schedule(-5, "remember")
    with pytest.raises(dsl.ScheduleError, match='"fortnight" is not understood'):
        await handle.schedule("every fortnight", "remember", timezone="UTC")
    with pytest.raises(ValueError, match="whole number ≥ 1"):
        await handle.schedule_every(0, "remember")


async def test_a_method_that_raises_fails_its_run():
    handle = await ScheduledAgent.aget("api5")
    entry = await handle.schedule(0, "explode", "payload-x")
    await runs.tick(now=timezone.now() + timedelta(seconds=1))
    run = await ScheduleRun.objects.filter(occurrence_key__startswith=f"{entry.id}:").afirst()
    assert run is None  # one-off: its row (and run) are gone once it ran ...
    assert SCHEDULE_CALLS.get("api5") is None  # ... and the method raised before recording anything


async def test_an_action_keyed_by_the_occurrence_runs_once_however_often_the_occurrence_is_posted(make_schedule):
    """The idempotency key of the context reaches actions: the same occurrence charges once."""
    handle = await ScheduledAgent.aget("billing")
    row = await make_schedule("monthly-charge", "billing", '/tool charge {"customer": "acme"}', "0 6 1 * *",
                                  agent="scheduled-agent")
    run = await runs.run_now(row.pk)
    assert CHARGES == ["acme"]
    # The same occurrence posted again (as a retried run would): the ledger replays the charge.
    run = await ScheduleRun.objects.select_related("schedule", "instance").aget(pk=run.pk)
    again = runs.scheduled_message('/tool charge {"customer": "acme"}', runs.context_of(run))
    assert (await handle.save_messages([again])).status == "completed"
    assert CHARGES == ["acme"]
    # Another occurrence is another charge.
    await runs.run_now(row.pk)
    assert CHARGES == ["acme", "acme"]


# --------------------------------------------------------------------------------- admin facts
def test_system_tasks_are_the_code_registered_beat_schedule():
    tasks = {t["name"]: t for t in declared.system_tasks()}
    assert tasks["agents-run-due-schedules"]["task"] == "agents_app.run_due_schedules"
    assert tasks["agents-run-due-schedules"]["schedule"] == "every 5 s"
    assert tasks["agents-recover-interrupted-turns"]["schedule"] == "every 10 s"
    assert tasks["agents-sweep-action-ledger"]["schedule"] == "cron 17 * * * *"
    assert {"agents-sweep-stream-buffers", "agents-sync-declared-schedules"} <= set(tasks)


def test_demo_agent_declares_nothing():
    assert declared.declared_tasks(DemoAgent(AgentInstance(slug="demo-agent", name="x"))) == {}
