"""Scheduled prompts at scale: 1,000 instances whose prompt is due in the same minute, and the cost of a tick.

    .venv/bin/python -m bench.schedules [--schedules 1000] [--idle 100000] [--sqlite] [--keep]

It starts a throwaway PostgreSQL cluster (``--sqlite``: an SQLite file in WAL mode instead) and a
Redis (``tests/support/live.py``), migrates the database, and makes ``--schedules`` demo-agent
instances, each with an operator's schedule "every day at HH:MM" (UTC) for the next minute that is
at least 40 s away (the *due minute*). It starts Celery beat (the production beat schedule: a
claim every ``AGENT_SCHEDULE_TICK_SECONDS``, 5 s) and two Celery workers (solo pool: one run at a
time each), with the production settings and the offline demo model (no word delay), and waits
until every run has finished. Reported from the due minute:

* *all claimed*: the last run's claim (the claiming tick starts at most one tick after the minute);
* *first / all started*: the first and the last turn's start;
* *all finished*: the last turn's end, and the runs per second from the due minute to it.

Then beat and the workers are stopped and the database side of one tick (``recover_lost`` +
``claim_due`` batches, what ``runs.tick`` runs before handing runs over) is measured in this
process with ``CaptureQueriesContext``: with nothing due among 0, ``--schedules`` and ``--idle``
schedules (the number of queries must not grow with the schedules that are not due: the due ones
are a range of the partial index ``schedule_due``), and with ``--schedules`` due at once.
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if not __package__:  # run as a file: import the project, not the bench scripts, as top-level modules
    sys.path[0] = str(ROOT)

# Seconds from now to the due minute at least: the time to start beat and two workers.
LEAD_SECONDS = 40
BATCH = 5_000
# How long the runs may take before the benchmark gives up.
PATIENCE_SECONDS = 900


def configure(workdir: Path, database_url: str) -> None:
    """This process on the stack's database, with the production settings (no Celery worker here)."""
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "thinkproject.settings", "DATABASE_URL": database_url, "VAR_DIR": str(workdir),
        "CHANNEL_LAYER": "memory", "AGENT_LOG_LEVEL": "WARNING",
    })
    import django

    django.setup()


def due_minute() -> datetime:
    from django.utils import timezone

    now = timezone.now()
    return (now + timedelta(seconds=LEAD_SECONDS + 60)).replace(second=0, microsecond=0)


def make_schedules(count: int, due: datetime | None, prefix: str) -> None:
    """``count`` instances with a daily schedule each; due at ``due`` (None: tomorrow at this time)."""
    from django.utils import timezone

    from agents_app.models import AgentInstance, Schedule
    from agents_app.schedules import language as dsl

    at = due or timezone.now() + timedelta(days=1)
    written = f"every day at {at:%H:%M}"
    spec = dsl.to_spec(dsl.parse(written, timezone="UTC"))
    for start in range(0, count, BATCH):
        instances = AgentInstance.objects.bulk_create(
            [AgentInstance(slug="demo-agent", name=f"{prefix}-{i}") for i in range(start, min(count, start + BATCH))])
        Schedule.objects.bulk_create([
            Schedule(name="daily-report", instance=instance, prompt="Generate the daily report.", schedule=written,
                     timezone="UTC", spec=spec, next_run_at=at) for instance in instances])


def wait_for_runs(count: int) -> None:
    from agents_app.models import ScheduleRun

    deadline = time.monotonic() + PATIENCE_SECONDS
    while ScheduleRun.objects.filter(status__in=ScheduleRun.UNFINISHED_STATUSES).exists() or \
            ScheduleRun.objects.count() < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs not finished after {PATIENCE_SECONDS} s")
        time.sleep(0.5)


def end_to_end(count: int, due: datetime) -> list[list[Any]]:
    from django.db.models import Max, Min

    from agents_app.models import ScheduleRun, Turn

    runs = ScheduleRun.objects.aggregate(claimed=Max("claimed_at"), first=Min("claimed_at"))
    turns = Turn.objects.aggregate(first=Min("started_at"), started=Max("started_at"), finished=Max("finished_at"))
    statuses = sorted(set(ScheduleRun.objects.values_list("status", flat=True)))

    def since(moment: datetime) -> float:
        return (moment - due).total_seconds()

    finished = since(turns["finished"])
    return [[count, Turn.objects.count(), ",".join(statuses), since(runs["claimed"]), since(turns["first"]),
             since(turns["started"]), finished, count / finished]]


def tick_queries(label: str, total: int, due: int) -> list[Any]:
    """The database side of one tick, in this process: queries and wall time."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents_app.schedules import runs

    started = time.perf_counter()
    with CaptureQueriesContext(connection) as captured:
        runs.recover_lost()
        claimed = 0
        for _ in range(runs.MAX_BATCHES_PER_TICK):
            seen, won = runs.claim_due()
            claimed += len(won)
            if seen < runs.CLAIM_BATCH:
                break
    elapsed = (time.perf_counter() - started) * 1000
    assert claimed == due, (claimed, due)
    return [label, total, due, len(captured), elapsed]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--schedules", type=int, default=1000, help="instances with a prompt due (default 1000)")
    parser.add_argument("--idle", type=int, default=100_000, help="schedules not due (default 100000)")
    parser.add_argument("--sqlite", action="store_true", help="SQLite (WAL) instead of PostgreSQL")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory and print it")
    args = parser.parse_args()
    if not (1 <= args.schedules <= 20_000 and args.schedules <= args.idle <= 1_000_000):
        parser.error("--schedules 1..20000, --idle --schedules..1000000")

    from bench._stack import machine_load, report
    from tests.support.live import LiveStack, PostgresServer, RedisServer

    workdir = Path(tempfile.mkdtemp(prefix="think-bench-schedules-"))
    pgdir = None if args.sqlite else Path(tempfile.mkdtemp(prefix="think-bench-pg-"))
    server = PostgresServer(pgdir) if pgdir is not None else None
    database = "sqlite" if server is None else "postgres"
    redis = RedisServer(workdir)
    stack: LiveStack | None = None
    try:
        url = server.url if server is not None else f"sqlite:///{workdir / 'schedules.sqlite3'}"
        stack = LiveStack(workdir, redis.url, url, extra_env={"AGENT_LOG_LEVEL": "WARNING"})
        configure(workdir, url)
        print(f"machine: {machine_load()} (other processes on the machine skew the wall times)", flush=True)
        due = due_minute()
        make_schedules(args.schedules, due, "due")
        stack.start_celery_worker("w1")
        stack.start_celery_worker("w2")
        stack.start_celery_beat()
        print(f"{database}: {args.schedules} prompts due at {due:%H:%M:%S} UTC; beat and 2 workers up, waiting…",
              flush=True)
        wait_for_runs(args.schedules)
        stack.stop()
        end = end_to_end(args.schedules, due)

        from agents_app.models import Schedule

        Schedule.objects.all().delete()
        rows = [tick_queries("nothing due", 0, 0)]
        make_schedules(args.schedules, None, "idle-a")
        rows.append(tick_queries("nothing due", args.schedules, 0))
        make_schedules(args.idle - args.schedules, None, "idle-b")
        rows.append(tick_queries("nothing due", args.idle, 0))
        make_schedules(args.schedules, due - timedelta(minutes=1), "late")
        rows.append(tick_queries("all claimed at once", args.idle + args.schedules, args.schedules))

        day = time.strftime("%Y-%m-%d")
        report(f"bench/schedules.py on {database}: {args.schedules} prompts due in one minute, beat + 2 workers, {day}",
               ["prompts", "turns", "statuses", "all claimed s", "first started s", "all started s",
                "all finished s", "runs/s"], end)
        report(f"bench/schedules.py on {database}: the database side of one tick, {day}",
               ["tick", "schedules", "due", "queries", "ms"], rows)
    finally:
        if stack is not None:
            stack.stop()
        redis.stop()
        if server is not None:
            server.stop()
        if pgdir is not None:
            shutil.rmtree(pgdir, ignore_errors=True)
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
