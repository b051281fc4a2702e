"""Scheduled prompts run exactly once per occurrence with two beats and two workers racing, on
PostgreSQL and on SQLite (WAL), with real processes: Redis, two ``celery beat`` and two
``celery worker`` processes of the production settings.

Both beats send the claim task every half second, so both workers claim at once; the schedules
become due together. Half of them are due now; the other half were missed for five and a half
hours (every process was down) and must run once each, not five times. Then every run task is delivered again,
as a broker redelivering after a lost acknowledgement would: nothing runs twice.
"""

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery import Celery

from tests.support.live import LiveStack, RedisServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.crossprocess

# Schedules of each kind (due now; missed for five and a half hours), one agent instance each.
SCHEDULES = 12
PATIENCE = 120.0

SETUP = """
from django.utils import timezone
from agents_app.schedules import language as dsl
from agents_app.models import AgentInstance, Schedule
for kind, schedule in (("due", "every day at 09:00"), ("missed", "every 1 hour")):
    spec = dsl.to_spec(dsl.parse(schedule, timezone=None if kind == "missed" else "UTC"))
    for i in range({count}):
        instance = AgentInstance.objects.create(slug="demo-agent", name=f"{{kind}}-{{i}}")
        Schedule.objects.create(name=kind, instance=instance, prompt=f"{{kind}} {{i}}", schedule=schedule,
                                spec=spec, enabled=False, next_run_at=timezone.now())
"""
# Everything becomes due at one moment, with both beats and both workers running.
RELEASE = """
from datetime import timedelta
from django.utils import timezone
from agents_app.models import Schedule
now = timezone.now()
Schedule.objects.filter(name="due").update(enabled=True, next_run_at=now)
# Off the hour: a slot of "every 1 hour" falling on this very moment would be an occurrence of
# its own, and a claim that read the clock just before this commit would rightly run it too.
Schedule.objects.filter(name="missed").update(enabled=True, next_run_at=now - timedelta(hours=5, minutes=30))
print(now.isoformat())
"""


def sql_reader(database: str) -> Callable[[str], list[tuple[Any, ...]]]:
    """Run a read-only query on the stack's database from the test process."""
    if database.startswith("sqlite:///"):
        path = database.removeprefix("sqlite:///")

        def sqlite_query(sql: str) -> list[tuple[Any, ...]]:
            with sqlite3.connect(path, timeout=20) as conn:
                return list(conn.execute(sql).fetchall())

        return sqlite_query

    def postgres_query(sql: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(database, autocommit=True) as conn:
            return list(conn.execute(sql).fetchall())

    return postgres_query


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer, database: str) -> Iterator[LiveStack]:
    live = LiveStack(tmp_path, redis.url, database, extra_env={"AGENT_SCHEDULE_TICK_SECONDS": "0.5"})
    yield live
    live.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        live.print_logs()


def log_lines(stack: LiveStack, pattern: str, containing: str) -> list[str]:
    return [line for log in stack.workdir.glob(pattern) for line in log.read_text(errors="replace").splitlines()
            if containing in line]


def test_two_beats_and_two_workers_run_each_occurrence_once(stack: LiveStack, database: str, redis: RedisServer):
    query = sql_reader(database)
    stack.manage("shell", "-c", SETUP.format(count=SCHEDULES))
    stack.start_celery_worker("w1")
    stack.start_celery_worker("w2")
    stack.start_celery_beat("beat1")
    stack.start_celery_beat("beat2")
    wait_until(lambda: all(
        log_lines(stack, f"celery-{beat}.log", "Sending due task agents-run-due-schedules")
        for beat in ("beat1", "beat2")), "both beats to send a claim", timeout=PATIENCE,
        on_timeout=stack.print_logs)
    stack.manage("shell", "-c", RELEASE)

    finished = "SELECT count(*) FROM agents_app_schedulerun WHERE status = 'completed'"
    wait_until(lambda: query(finished)[0][0] >= 2 * SCHEDULES, "every run to complete", timeout=PATIENCE,
               on_timeout=stack.print_logs)
    time.sleep(2)  # a few more ticks of both beats: nothing more may be claimed
    runs = query("SELECT s.name, r.status, r.trigger, count(*) FROM agents_app_schedulerun r JOIN "
                 "agents_app_schedule s ON s.id = r.schedule_id GROUP BY r.schedule_id, s.name, r.status, r.trigger")
    assert sorted((name, status, trigger, count) for name, status, trigger, count in runs) == sorted(
        [("due", "completed", "schedule", 1)] * SCHEDULES + [("missed", "completed", "schedule", 1)] * SCHEDULES)
    # A missed schedule ran for its first missed slot; its next run is the first slot after now.
    late = query("SELECT count(*) FROM agents_app_schedule s JOIN agents_app_schedulerun r ON r.id = s.last_run_id "
                 "WHERE s.name = 'missed' AND s.next_run_at > r.scheduled_for")
    assert late == [(SCHEDULES,)]
    assert_one_turn_and_one_scheduled_prompt_per_instance(query)
    claims = log_lines(stack, "celery-w*.log", "agents_app.run_due_schedules")
    assert claims, "the workers ran no claim"

    # Every run task delivered again (a broker's redelivery): each is refused by its run's state.
    run_ids = [row[0] for row in query("SELECT id FROM agents_app_schedulerun")]
    client = Celery(broker=redis.url)
    for run_id in run_ids:
        client.send_task("agents_app.run_schedule", args=(run_id,))
    wait_until(lambda: len(
        log_lines(stack, "celery-w*.log", "'status': None}")) >= len(run_ids), "the repeated deliveries",
        timeout=PATIENCE, on_timeout=stack.print_logs)
    assert query(finished)[0][0] == 2 * SCHEDULES
    assert_one_turn_and_one_scheduled_prompt_per_instance(query)


def assert_one_turn_and_one_scheduled_prompt_per_instance(query: Callable[[str], list[tuple[Any, ...]]]) -> None:
    turns = query("SELECT instance_id, count(*) FROM agents_app_turn GROUP BY instance_id")
    assert len(turns) == 2 * SCHEDULES and {count for _, count in turns} == {1}
    prompts = query("SELECT instance_id, data FROM agents_app_chatmessage WHERE role = 'user'")
    assert len(prompts) == 2 * SCHEDULES
    assert len({instance for instance, _ in prompts}) == 2 * SCHEDULES
    for _, data in prompts:
        message = data if isinstance(data, dict) else json.loads(data)
        assert message["metadata"]["source"] == "schedule"
