"""The action ledger across processes: one execution per key on PostgreSQL and on SQLite (WAL).

Each worker is a separate Python process (``django.setup()`` with the production settings on a
database migrated by ``manage.py migrate``) that calls ``ledger.run_once`` for the keys the test
sends it on stdin. Commands carry a wall-clock start time, so the workers hit the database at the
same moment. The side effect appends ``<key> <pid>`` to a shared file: its lines count executions.

Across processes a caller that loses the race finds the winner's ``pending`` row and gets
``pending`` (docs/architecture.md#ledger: there is no cross-process coalescing); the workers retry
such calls every 10 ms, as a client would, until the settled result replays.
"""

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.live import LiveStack, ScriptProcess

pytestmark = pytest.mark.crossprocess

# The worker: a command per stdin line, an answer per stdout line (JSON).
WORKER = r"""
import asyncio, json, os, sys, time
from datetime import timedelta

import django
django.setup()

from channels.db import database_sync_to_async
from django.db import connection
from django.utils import timezone

from agents_app.actions import ledger
from agents_app.models import LedgerEntry

EFFECTS = os.environ["LEDGER_EFFECTS"]
connection.ensure_connection()


def say(**message):
    print(json.dumps(message), flush=True)


async def call(cmd):
    key = cmd["key"]

    async def execute():
        with open(EFFECTS, "a") as effects:
            effects.write(f"{key} {os.getpid()}\n")
        if cmd.get("block"):
            say(executing=key)
            await asyncio.Event().wait()  # until SIGKILL
        await asyncio.sleep(cmd.get("work_s", 0))
        return {"effect": key, "pid": os.getpid()}

    outcomes = []
    deadline = time.monotonic() + 30
    while True:
        result = await ledger.run_once(
            key, action_name="effect", input_hash=ledger.input_hash({"key": key}), request_id="r1",
            tool_call_id="", retryable=True, lease=timedelta(seconds=cmd.get("lease_s", 300)), execute=execute,
            now=timezone.now() + timedelta(seconds=cmd.get("now_offset_s", 0)),
        )
        outcomes.append(result.outcome)
        if result.outcome != "pending" or cmd.get("once") or time.monotonic() > deadline:
            return {"key": key, "outcomes": outcomes, "value": result.value, "executed": result.executed}
        await asyncio.sleep(0.01)


@database_sync_to_async
def rows():
    return [list(r) for r in LedgerEntry.objects.order_by("key").values_list("key", "status")]


async def main():
    say(ready=os.getpid())
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        cmd = json.loads(line)
        if cmd.get("rows"):
            say(rows=await rows())
            continue
        if cmd.get("claim_only"):  # claim and never settle: what a process that died leaves behind
            claimed = await database_sync_to_async(ledger.claim)(
                cmd["key"], action_name="effect", input_hash=ledger.input_hash({"key": cmd["key"]}),
                retryable=True, lease=None)
            say(outcome=claimed.outcome)
            continue
        delay = cmd.get("at", 0) - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        say(**await call(cmd))


asyncio.run(main())
"""


class Worker(ScriptProcess):
    """One worker process (a ``ScriptProcess`` running ``WORKER``)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__(WORKER, env, log)


class Cluster:
    """A migrated database, a shared side-effect file, and worker processes on both."""

    def __init__(self, workdir: Path, database_url: str) -> None:
        self.workdir = workdir
        self.effects = workdir / "effects.txt"
        self.effects.touch()
        # A Redis URL is required by LiveStack's environment, but nothing here connects to it.
        self.stack = LiveStack(workdir, "redis://127.0.0.1:9/0", database_url,
                               extra_env={"CHANNEL_LAYER": "memory", "LEDGER_EFFECTS": str(self.effects),
                                          "AGENT_LOG_LEVEL": "WARNING"})
        self.workers: list[Worker] = []

    def start(self, n: int) -> list[Worker]:
        started = [Worker(self.stack.env, self.workdir / f"worker-{len(self.workers) + i}.log") for i in range(n)]
        self.workers += started
        for worker in started:
            assert "ready" in worker.receive()
        return started

    def together(self, workers: list[Worker], **command: Any) -> list[dict[str, Any]]:
        """Send ``command`` to every worker, to start at the same instant; their answers, in order."""
        at = time.time() + 0.1
        for worker in workers:
            worker.send(at=at, **command)
        return [worker.receive() for worker in workers]

    def executions(self, key: str) -> list[str]:
        return [line for line in self.effects.read_text().splitlines() if line.split()[0] == key]

    def rows(self) -> list[list[str]]:
        worker = next(w for w in self.workers if w.proc.poll() is None)
        worker.send(rows=True)
        return worker.receive()["rows"]

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()


@pytest.fixture
def cluster(request: pytest.FixtureRequest, tmp_path: Path, database: str) -> Iterator[Cluster]:
    live = Cluster(tmp_path, database)
    yield live
    live.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for log in sorted(tmp_path.glob("worker-*.log")):
            print(f"----- {log.name}", log.read_text(errors="replace")[-3000:], sep="\n")


ROUNDS = 20


def assert_one_execution_per_key(cluster: Cluster, workers: list[Worker]) -> Counter[str]:
    """ROUNDS keys, each sent to every worker at once: one execution each, every caller gets its value."""
    first_outcomes: Counter[str] = Counter()
    for i in range(ROUNDS):
        key = f"action:effect:k{i}"
        answers = cluster.together(workers, key=key, work_s=0.02)
        executions = cluster.executions(key)
        assert len(executions) == 1, executions
        executor_pid = int(executions[0].split()[1])
        assert [a["value"] for a in answers] == [{"effect": key, "pid": executor_pid}] * len(workers)
        assert sum(a["executed"] for a in answers) == 1
        assert sorted(a["outcomes"][-1] for a in answers) == ["claimed"] + ["replayed"] * (len(workers) - 1)
        first_outcomes.update(a["outcomes"][0] for a in answers)
    print(f"first outcomes over {ROUNDS} rounds x {len(workers)} processes: {dict(first_outcomes)}")
    assert cluster.rows() == sorted([f"action:effect:k{i}", "settled"] for i in range(ROUNDS))
    return first_outcomes


@pytest.mark.requires_postgres
@pytest.mark.parametrize("database", ["postgres"], indirect=True)
def test_four_processes_on_postgres_execute_each_key_once(cluster: Cluster) -> None:
    workers = cluster.start(4)
    first = assert_one_execution_per_key(cluster, workers)
    # Losers that met the winner's row while it ran prove the calls really overlapped.
    assert first["claimed"] == ROUNDS and first["pending"] > 0, first


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
def test_two_processes_on_sqlite_execute_each_key_once(cluster: Cluster) -> None:
    workers = cluster.start(2)
    first = assert_one_execution_per_key(cluster, workers)
    assert first["claimed"] == ROUNDS and first["pending"] > 0, first


def test_a_process_killed_mid_execution_leaves_a_row_only_a_stale_retry_reclaims(cluster: Cluster) -> None:
    key = "action:effect:killed"
    [victim, a, b, c] = cluster.start(4)
    victim.send(key=key, block=True, once=True)
    assert victim.receive() == {"executing": key}
    victim.kill()
    assert len(cluster.executions(key)) == 1
    assert cluster.rows() == [[key, "pending"]]

    # Within the lease: the attempt is in an unknown state, so nobody runs it again.
    [fresh] = cluster.together([a], key=key, once=True)
    assert (fresh["outcomes"], fresh["executed"]) == (["pending"], False)
    assert len(cluster.executions(key)) == 1

    # Past the lease (now = +301 s; the lease is 300 s), two processes retry at once: one reclaims.
    answers = cluster.together([a, b], key=key, now_offset_s=301, work_s=0.02)
    assert len(cluster.executions(key)) == 2
    assert sum(x["executed"] for x in answers) == 1
    assert sorted(x["outcomes"][-1] for x in answers) == ["reclaimed", "replayed"]
    reclaimer = next(x for x in answers if x["executed"])
    assert [x["value"] for x in answers] == [reclaimer["value"]] * 2
    assert cluster.rows() == [[key, "settled"]]

    [later] = cluster.together([a], key=key, once=True)
    assert (later["outcomes"], later["value"]) == (["replayed"], reclaimer["value"])
    assert len(cluster.executions(key)) == 2

    # More stale rows (claimed, never settled), each reclaimed by three processes at once.
    for i in range(ROUNDS):
        stale = f"action:effect:stale{i}"
        a.send(key=stale, claim_only=True)
        assert a.receive() == {"outcome": "claimed"}
        answers = cluster.together([a, b, c], key=stale, now_offset_s=301, work_s=0.02)
        assert len(cluster.executions(stale)) == 1
        assert sorted(x["outcomes"][-1] for x in answers) == ["reclaimed", "replayed", "replayed"]
        assert len({json.dumps(x["value"]) for x in answers}) == 1
