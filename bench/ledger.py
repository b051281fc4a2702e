"""What the action ledger costs per call, and how many calls per second it settles, on SQLite and PostgreSQL.

    .venv/bin/python -m bench.ledger [--calls 1000] [--tasks 8] [--processes 4] [--databases sqlite,postgres]

For each database it makes a fresh one (an SQLite file in WAL mode; a throwaway PostgreSQL
cluster from ``tests/support/live.py``), migrates it with ``manage.py migrate`` in a subprocess,
and measures ``ledger.run_once`` with the production settings (``thinkproject.settings``; the
connection is reused, ``DB_CONN_MAX_AGE``) around an ``execute`` that returns a small dict at once:

* *direct*: ``await execute()`` with no ledger, the baseline;
* *distinct keys*: every call a new key (claim INSERT + settle UPDATE, two thread hops);
* *one key*: every call the same key (the first executes, then replays: a failed INSERT + a read);
* *action pipeline*: a whole action call (``actions.pipeline.execute_action``: permissions,
  ``authorize_action``, idempotency-key policy, ledger, timeout, output preparation), distinct
  keys, against the same ``execute``: what an ``action()`` costs over a plain tool;
* the ledger workloads again from T asyncio tasks in one process (``--tasks``), and from P
  processes at once (``--processes``; each does calls/P, started together on a wall-clock mark).

Columns: *calls/s* = calls / wall time of the row; *µs/call* = latency of one call (median, p95),
which includes computing the input hash; *overhead* = median µs/call minus the direct median;
*executions* = times ``execute`` ran (1 for one key, unless a call found the row pending: those
are counted under outcomes and not retried). Wall times move with the machine's load (printed).
"""

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bench._stack import machine_load, median, p95, report
from tests.support.live import PYTHON, ROOT, LiveStack, PostgresServer

INPUT = {"order_id": 4217, "amount": "12.50", "reason": "damaged"}
HEADERS = ["database", "workload", "concurrency", "calls", "executions", "wall s", "calls/s",
           "µs/call median", "µs/call p95", "overhead µs", "outcomes"]


# --------------------------------------------------------------------------------------- measuring side
def _setup_django() -> None:
    import django

    django.setup()


class _RefundInput(BaseModel):
    order_id: str
    amount: str
    reason: str


async def _bench_action(execute: Any) -> tuple[Any, Any]:
    """An agent with one action around ``execute`` (key: the order id), on a fresh instance."""
    from channels.db import database_sync_to_async

    from agents_app import ChatAgent, action
    from agents_app.models import AgentInstance

    class BenchAgent(ChatAgent):
        def get_actions(self) -> dict[str, Any]:
            return {"refund": action(description="Refund", input_schema=_RefundInput, permissions=["refund"],
                                     execute=lambda input, ctx: execute(),
                                     idempotency_key=lambda input, ctx: input.order_id)}

    instance = await database_sync_to_async(AgentInstance.objects.create)(slug="bench", name=uuid.uuid4().hex)
    agent = BenchAgent.for_turn(instance, request_id="bench")
    return agent.turn, agent.compiled_actions()["refund"]


async def _calls(indices: range, *, prefix: str, same_key: bool, mode: str,
                 latencies: list[float], outcomes: Counter[str], executed: list[int]) -> None:
    from agents_app.actions import ledger
    from agents_app.actions.pipeline import execute_action

    def execute() -> dict[str, Any]:
        executed[0] += 1
        return {"ok": True, "refund": "12.50"}

    async def execute_async() -> dict[str, Any]:
        return execute()

    turn, refund = await _bench_action(execute) if mode == "action" else (None, None)
    for i in indices:
        key = f"action:refund:{prefix}" if same_key else f"action:refund:{prefix}-{i}"
        started = time.perf_counter()
        if mode == "ledger":
            result = await ledger.run_once(
                key, action_name="refund", input_hash=ledger.input_hash(INPUT), request_id="bench",
                tool_call_id=f"tc-{i}", retryable=True, lease=ledger.DEFAULT_PENDING_RETRY_LEASE,
                execute=execute_async,
            )
            outcomes[result.outcome + (" (coalesced)" if result.coalesced else "")] += 1
        elif mode == "action":
            output = await execute_action(turn, refund, refund.validate_input({**INPUT, "order_id": key}),
                                          tool_call_id=f"tc-{i}", messages=[])
            outcomes["error" if "error" in output else "executed"] += 1
        else:
            await execute_async()
            outcomes["direct"] += 1
        latencies.append(time.perf_counter() - started)


async def _in_process(workload: str, *, calls: int, tasks: int) -> dict[str, Any]:
    """One in-process row: ``calls`` calls spread over ``tasks`` asyncio tasks."""
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    executed = [0]
    prefix = uuid.uuid4().hex[:8]
    mode = {"direct": "direct", "action pipeline": "action"}.get(workload, "ledger")
    options = {"prefix": prefix, "same_key": workload == "one key", "mode": mode,
               "latencies": latencies, "outcomes": outcomes, "executed": executed}
    started = time.perf_counter()
    await asyncio.gather(*(_calls(range(k, calls, tasks), **options) for k in range(tasks)))
    wall = time.perf_counter() - started
    return {"workload": workload, "concurrency": f"{tasks} task{'s' * (tasks > 1)}", "calls": calls,
            "executions": executed[0], "wall": wall, "latencies": latencies, "outcomes": dict(outcomes)}


def child(args: argparse.Namespace) -> None:
    """The in-process rows, as one JSON line on stdout."""
    _setup_django()

    async def main() -> list[dict[str, Any]]:
        await _in_process("distinct keys", calls=100, tasks=1)  # warm-up: connection, imports, caches
        rows = []
        for tasks in (1, args.tasks):
            for workload in ("direct", "distinct keys", "one key", "action pipeline"):
                rows.append(await _in_process(workload, calls=args.calls, tasks=tasks))
        return rows

    print(json.dumps(asyncio.run(main())))


def worker(args: argparse.Namespace) -> None:
    """One process of a multi-process row: ready → wait for the start mark on stdin → calls → JSON."""
    _setup_django()
    from django.db import connection

    connection.ensure_connection()
    latencies: list[float] = []
    outcomes: Counter[str] = Counter()
    executed = [0]
    indices = range(args.index, args.calls, args.processes)

    async def main() -> None:
        await _calls(range(0, 20), prefix=f"warm-{uuid.uuid4().hex[:8]}", same_key=False, mode="ledger",
                     latencies=[], outcomes=Counter(), executed=[0])
        print("ready", flush=True)
        start_at = float(sys.stdin.readline())
        await asyncio.sleep(max(0.0, start_at - time.time()))
        await _calls(indices, prefix=args.prefix, same_key=args.same_key, mode="ledger",
                     latencies=latencies, outcomes=outcomes, executed=executed)

    asyncio.run(main())
    print(json.dumps({"end": time.time(), "latencies": latencies, "outcomes": dict(outcomes),
                      "executions": executed[0]}), flush=True)


# --------------------------------------------------------------------------------------- orchestration
def _processes_row(env: dict[str, str], workload: str, *, calls: int, processes: int) -> dict[str, Any]:
    prefix = uuid.uuid4().hex[:8]
    command = [PYTHON, "-m", "bench.ledger", "--role", "worker", "--calls", str(calls), "--processes",
               str(processes), "--prefix", prefix] + (["--same-key"] if workload == "one key" else [])
    procs = [subprocess.Popen([*command, "--index", str(i)], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for i in range(processes)]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a bench worker failed to start")
        start_at = time.time() + 0.2
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{start_at}\n")
            proc.stdin.flush()
        reports = [json.loads(proc.communicate(timeout=600)[0].splitlines()[-1]) for proc in procs]
    finally:
        for proc in procs:  # only on an error: normally they have exited
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outcomes: Counter[str] = Counter()
    for worker_report in reports:
        outcomes.update(worker_report["outcomes"])
    return {"workload": workload, "concurrency": f"{processes} processes", "calls": calls,
            "executions": sum(r["executions"] for r in reports), "wall": max(r["end"] for r in reports) - start_at,
            "latencies": [x for r in reports for x in r["latencies"]], "outcomes": dict(outcomes)}


def _measure(database: str, url: str, workdir: Path, args: argparse.Namespace) -> list[list[Any]]:
    stack = LiveStack(workdir, "redis://127.0.0.1:9/0", url,  # Redis is never contacted here
                      extra_env={"CHANNEL_LAYER": "memory", "AGENT_LOG_LEVEL": "WARNING"})
    result = subprocess.run([PYTHON, "-m", "bench.ledger", "--role", "child", "--calls", str(args.calls),
                             "--tasks", str(args.tasks)], cwd=ROOT, env=stack.env, capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"bench child failed:\n{result.stderr[-3000:]}")
    rows = json.loads(result.stdout.splitlines()[-1])
    for workload in ("distinct keys", "one key"):
        rows.append(_processes_row(stack.env, workload, calls=args.calls, processes=args.processes))
    direct = {r["concurrency"]: median(r["latencies"]) for r in rows if r["workload"] == "direct"}
    baseline = direct["1 task"]
    out = []
    for r in rows:
        mid = median(r["latencies"]) * 1e6
        overhead = "" if r["workload"] == "direct" else f"{mid - baseline * 1e6:.0f}"
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(r["outcomes"].items()))
        out.append([database, r["workload"], r["concurrency"], r["calls"], r["executions"], r["wall"],
                    r["calls"] / r["wall"], mid, p95(r["latencies"]) * 1e6, overhead, outcomes])
        print(f"  {database}, {r['workload']}, {r['concurrency']}: {r['calls'] / r['wall']:.0f} calls/s, "
              f"median {mid:.0f} µs/call, {r['executions']} executions", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="calls per row (default 1000)")
    parser.add_argument("--tasks", type=int, default=8, help="asyncio tasks of the concurrent rows (default 8)")
    parser.add_argument("--processes", type=int, default=4, help="processes of the multi-process rows (default 4)")
    parser.add_argument("--databases", default="sqlite,postgres", help="comma list of sqlite, postgres")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--role", choices=["main", "child", "worker"], default="main", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--prefix", default="", help=argparse.SUPPRESS)
    parser.add_argument("--same-key", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "child":
        return child(args)
    if args.role == "worker":
        return worker(args)
    databases = [d for d in args.databases.split(",") if d]
    if not (1 <= args.calls <= 100_000 and 1 <= args.tasks <= 256 and 1 <= args.processes <= 32) or (
            set(databases) - {"sqlite", "postgres"}):
        parser.error("--calls 1..100000, --tasks 1..256, --processes 1..32, --databases sqlite,postgres")

    print(f"machine: {machine_load()} (other processes on the machine skew the wall times)", flush=True)
    rows: list[list[Any]] = []
    for database in databases:
        workdir = Path(tempfile.mkdtemp(prefix=f"think-bench-ledger-{database}-"))
        # The server's own directory: PostgresServer hands it to the "postgres" user.
        pgdir = Path(tempfile.mkdtemp(prefix="think-bench-pg-")) if database == "postgres" else None
        server = PostgresServer(pgdir) if pgdir is not None else None
        try:
            url = server.url if server is not None else f"sqlite:///{workdir / 'ledger.sqlite3'}"
            print(f"{database}: measuring…", flush=True)
            rows += _measure(database, url, workdir, args)
        finally:
            if server is not None:
                server.stop()
            for path in (workdir, pgdir):
                if path is not None:
                    shutil.rmtree(path, ignore_errors=True)
    report(f"bench/ledger.py: {args.calls} calls per row, {time.strftime('%Y-%m-%d')}", HEADERS, rows)
    if args.json:
        args.json.write_text(json.dumps({"headers": HEADERS, "rows": rows}, indent=1))
    return None


if __name__ == "__main__":
    main()
