"""What one turn costs inside one process: SQL statements, thread hops, CPU and wall time.

    .venv/bin/python -m bench.turn_cost [--turns 30] [--chunks 1] [--history 0] [--by-caller]
                                        [--database postgres [--round-trips]] [--profile FILE]

Issue 16's P1 row (a minimal turn) is mostly fixed per-turn work, not streaming, and the other
scripts see it only from outside. This one runs the project's ASGI application in this process
(``channels.testing.WebsocketCommunicator``, the in-memory channel layer, a fresh SQLite file, the
demo model), sends T sequential turns of ``/burst N`` on one socket with the whole history re-sent
(as ``useAgentChat`` does; ``--history H`` starts from H stored messages, ``--old-turns N`` adds N
finished turns of the same instance and user after the first turn), waits after each turn
until its background work has settled, and counts, per turn:

* SQL statements on every connection of the process (``connection.execute_wrapper``), with
  ``--by-caller`` grouped by the innermost ``agents_app`` frame that issued them (outside
  ``agents_app/statements.py``, which runs the statements others write);
* thread hops: calls of ``asgiref``'s ``SyncToAsync`` (``database_sync_to_async`` included),
  with ``--by-caller`` by the function each one runs;
* process CPU (``time.process_time``, every thread) and wall time from send to ``done``.

It prints medians over the turns after the first (the first one creates the instance).

``--database postgres`` runs the same on a throwaway PostgreSQL cluster (``tests.support.live.
PostgresServer``) instead of the SQLite file; ``--round-trips`` then also counts the times the
process waits for PostgreSQL's answers (a wait of psycopg's that ended with the socket readable:
one per statement, health-check ``SELECT 1``, ``BEGIN`` and ``COMMIT`` (more for an answer that
comes in parts), and one per pipeline's sync or flush however many statements it carries).
Counting costs a little CPU.
"""

import argparse
import asyncio
import collections
import cProfile
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _configure(workdir: str, database_url: str | None = None) -> None:
    """The production settings in this process, on a fresh database (``database_url``, or an SQLite file in
    ``workdir``), migrated; the in-memory channel layer. ``bench/providers.py`` and ``bench/waits.py`` use it too."""
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    os.environ["VAR_DIR"] = workdir
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    os.environ["CHANNEL_LAYER"] = "memory"
    os.environ["AGENT_LOG_LEVEL"] = "WARNING"
    os.environ["DJANGO_SETTINGS_MODULE"] = "thinkproject.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


class Counters:
    """Statements and hops seen while ``active``, with the caller of each statement."""

    def __init__(self, by_caller: bool, explain: bool = False, round_trips: bool = False) -> None:
        self.by_caller = by_caller
        self.round_trips_wanted = round_trips
        # The turn's reads and updates (text → parameters), for ``--explain``.
        self.explain = explain
        self.seen: dict[str, Any] = {}
        self.statements = 0
        self.hops = 0
        self.round_trips = 0
        self.callers: collections.Counter[str] = collections.Counter()
        self.hop_callers: collections.Counter[str] = collections.Counter()

    def reset(self) -> None:
        self.statements = self.hops = self.round_trips = 0
        self.seen.clear()
        self.callers.clear()
        self.hop_callers.clear()

    def statement(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        self.statements += 1
        if self.explain and sql.lstrip().split(" ", 1)[0].upper() in ("SELECT", "UPDATE", "DELETE"):
            self.seen.setdefault(sql, params)
        if self.by_caller:
            frames = [f for f in traceback.extract_stack()
                      if "/agents_app/" in f.filename and not f.filename.endswith("/agents_app/statements.py")]
            where = f"{frames[-1].filename.split('/agents_app/')[1]}:{frames[-1].name}" if frames else "(other)"
            self.callers[f"{where}  {sql.split(' ', 1)[0]}"] += 1
        return execute(sql, params, many, context)


@contextmanager
def _counting(counters: Counters) -> Iterator[None]:
    from asgiref import sync
    from django.db import connections
    from django.db.backends.signals import connection_created

    def install(sender: Any, connection: Any, **kwargs: Any) -> None:
        if counters.statement not in connection.execute_wrappers:
            connection.execute_wrappers.append(counters.statement)

    connection_created.connect(install, weak=False)
    for connection in connections.all():
        install(None, connection)
    original = sync.SyncToAsync.__call__

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        counters.hops += 1
        if counters.by_caller:
            counters.hop_callers[getattr(self.func, "__qualname__", repr(self.func))] += 1
        return await original(self, *args, **kwargs)

    sync.SyncToAsync.__call__ = counted  # type: ignore[method-assign]
    try:
        with _counting_round_trips(counters):
            yield
    finally:
        sync.SyncToAsync.__call__ = original  # type: ignore[method-assign]
        connection_created.disconnect(install)


@contextmanager
def _counting_round_trips(counters: Counters) -> Iterator[None]:
    """Count psycopg's waits for an answer (``--round-trips``): every wait of a connection goes
    through ``psycopg.waiting.wait`` with a generator that yields what it waits for."""
    if not counters.round_trips_wanted:
        yield
        return
    from psycopg import waiting

    original = waiting.wait

    def answers(gen: Any) -> Any:
        sent = None
        while True:
            try:
                state = gen.send(sent)
            except StopIteration as stop:
                return stop.value
            sent = yield state
            # A wait that ended with an answer to read, the socket not writable (a pipeline that
            # sends waits for either, and a writable socket is there at once); a wait's periodic
            # wake-up with nothing (``Ready.NONE``) is not one.
            if sent == waiting.Ready.R:
                counters.round_trips += 1

    def wait(gen: Any, *args: Any, **kwargs: Any) -> Any:
        return original(answers(gen), *args, **kwargs)

    waiting.wait = wait
    try:
        yield
    finally:
        waiting.wait = original


async def _run(args: argparse.Namespace, counters: Counters, database_cpu: Callable[[], float]
               ) -> list[dict[str, float]]:
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from agents_app.turns import engine
    from bench._stack import assistant_message, user_message
    from tests.support.sessions import session_key
    from thinkproject.asgi import application

    def login() -> str:
        return session_key(get_user_model().objects.create_user(username="bench", password="pw"))

    key = await database_sync_to_async(login)()
    headers = [(b"origin", b"http://localhost"), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={key}".encode())]
    ws = WebsocketCommunicator(application, "/agents/demo-agent/bench", headers=headers)
    connected, _ = await ws.connect()
    assert connected, "the socket was refused"
    history: list[dict[str, Any]] = []
    for index in range(args.history // 2):
        history.append(user_message(f"h{index}u", f"earlier {index}"))
        history.append(assistant_message(f"h{index}a", f"(demo model, offline) You said: earlier {index}"))
    rows = []
    profiler = cProfile.Profile()
    for turn in range(args.turns):
        if turn == 1 and args.old_turns:
            await database_sync_to_async(_old_turns)(args.old_turns)
        user = user_message(f"u{turn}", f"/burst {args.chunks}")
        body = {"messages": [*history, user], "trigger": "submit-message"}
        frame = {"type": "cf_agent_use_chat_request", "id": f"r{turn}",
                 "init": {"method": "POST", "body": json.dumps(body)}}
        if turn == 1 and args.profile:
            profiler.enable()  # the turns after the first, as the medians
        counters.reset()
        # The cluster's CPU is read outside the clocks: a read scans /proc, a millisecond or more.
        db_cpu = database_cpu()
        cpu, wall = time.process_time(), time.perf_counter()
        await ws.send_json_to(frame)
        text, reply_id = [], f"a{turn}"
        while True:
            reply = await ws.receive_json_from(timeout=60)
            if reply.get("type") != "cf_agent_use_chat_response" or reply.get("id") != f"r{turn}":
                continue
            if reply.get("body"):
                chunk = json.loads(reply["body"])
                if chunk.get("type") == "text-delta":
                    text.append(chunk["delta"])
                elif chunk.get("type") == "start" and chunk.get("messageId"):
                    reply_id = chunk["messageId"]
            if reply.get("done"):
                break
        done = time.perf_counter() - wall
        pending = [task for task in engine._background if not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=60)
        cpu_ms = (time.process_time() - cpu) * 1000
        rows.append({"wall_ms": done * 1000, "cpu_ms": cpu_ms, "database_cpu_ms": (database_cpu() - db_cpu) * 1000,
                     "statements": counters.statements, "hops": counters.hops,
                     "round_trips": counters.round_trips})
        if turn == args.turns - 1 and args.by_caller:
            rows[-1]["callers"] = dict(counters.callers)  # type: ignore[assignment]
            rows[-1]["hop_callers"] = dict(counters.hop_callers)  # type: ignore[assignment]
        history += [user, assistant_message(reply_id, "".join(text))]
    profiler.disable()
    if args.profile:
        profiler.dump_stats(args.profile)
    await ws.disconnect()
    return rows


def _old_turns(count: int) -> None:
    """``count`` finished turns of the bench user's instance before the measured ones (``--old-turns``):
    the history a long-lived conversation leaves, which the turn path's reads must not scan."""
    from django.db import connection

    from agents_app.models import Turn

    last = Turn.objects.latest("id")
    Turn.objects.bulk_create(
        [Turn(instance_id=last.instance_id, user_id=last.user_id, request_id=f"old-{i}", status=Turn.Status.COMPLETED)
         for i in range(count)], batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # the planner's statistics, as autovacuum would gather them


def explain(seen: dict[str, Any]) -> None:
    """PostgreSQL's plan of each read and update of the last turn, with sequential scans switched
    off: a table this small is scanned whatever its indexes, so a ``Seq Scan`` that remains means
    no index serves the statement (``--explain``)."""
    from django.db import connection

    print("Plans of the last turn's reads and updates (enable_seqscan off):")
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        for sql, params in seen.items():
            cursor.execute(f"EXPLAIN {sql}", params)
            print(f"\n{' '.join(sql.split())[:150]}")
            for (line,) in cursor.fetchall():
                print(f"    {line}")
        cursor.execute("RESET enable_seqscan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--chunks", type=int, default=1)
    parser.add_argument("--history", type=int, default=0, help="messages re-sent before the first turn")
    parser.add_argument("--by-caller", action="store_true",
                        help="the last turn's statements by caller, and its thread hops by function")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite",
                        help="a fresh SQLite file (default) or a throwaway PostgreSQL cluster")
    parser.add_argument("--old-turns", type=int, default=0,
                        help="finished turns of the same instance and user stored after the first turn")
    parser.add_argument("--explain", action="store_true",
                        help="on PostgreSQL, the plan of each read and update of the last turn (seq scans off)")
    parser.add_argument("--round-trips", action="store_true",
                        help="on PostgreSQL, count the waits for the database's answers")
    parser.add_argument("--profile", help="cProfile the turns after the first into this file (pstats)")
    args = parser.parse_args()
    if (args.round_trips or args.explain) and args.database != "postgres":
        parser.error("--round-trips and --explain are PostgreSQL's: add --database postgres")
    sys.path.insert(0, os.getcwd())
    from bench._stack import cpu_seconds_tree
    from tests.support.live import PostgresServer

    with tempfile.TemporaryDirectory(prefix="think-turn-cost-") as workdir:
        postgres = PostgresServer(Path(workdir)) if args.database == "postgres" else None
        try:
            _configure(workdir, postgres.new_database("turn_cost") if postgres else None)
            counters = Counters(args.by_caller, args.explain, args.round_trips)
            with _counting(counters):
                rows = asyncio.run(_run(args, counters, lambda: cpu_seconds_tree(postgres.proc.pid)
                                        if postgres else 0.0))
            plans, counters.explain = dict(counters.seen), False
            if plans:
                explain(plans)
        finally:
            if postgres is not None:
                from django.db import connections

                connections.close_all()
                postgres.stop()
    warm = rows[1:] or rows
    summary = {name: statistics.median(row[name] for row in warm)
               for name in ("wall_ms", "cpu_ms", "statements", "hops", "round_trips")}
    # PostgreSQL's CPU comes in 10 ms ticks: a mean over the turns, not a median of mostly zeros.
    summary["database_cpu_ms"] = statistics.fmean(row["database_cpu_ms"] for row in warm)
    print(f"## bench/turn_cost.py: {args.turns} turns of /burst {args.chunks}, "
          f"history from {args.history} messages, {args.old_turns} old turns, one process, {args.database}")
    print("| turn median ms | CPU ms per turn | PostgreSQL CPU ms per turn (mean) | SQL statements per turn "
          "| thread hops per turn | round trips per turn |")
    print("|--:|--:|--:|--:|--:|--:|")
    trips = f"{summary['round_trips']:.0f}" if args.round_trips else ""
    print(f"| {summary['wall_ms']:.1f} | {summary['cpu_ms']:.1f} | {summary['database_cpu_ms']:.1f} "
          f"| {summary['statements']:.0f} "
          f"| {summary['hops']:.0f} | {trips} |")
    callers = rows[-1].get("callers")
    if callers:
        print("\nStatements of the last turn by caller:\n")
        for where, count in sorted(callers.items(), key=lambda item: -item[1]):  # type: ignore[union-attr]
            print(f"  {count:3d}  {where}")
        print("\nThread hops of the last turn by function:\n")
        for where, count in sorted(rows[-1]["hop_callers"].items(), key=lambda item: -item[1]):  # type: ignore[union-attr]
            print(f"  {count:3d}  {where}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"summary": summary, "turns": rows}, out, indent=1)


if __name__ == "__main__":
    main()
