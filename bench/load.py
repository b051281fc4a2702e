"""N concurrent sockets, one turn each, on 1 and 2 servers: does everyone get an answer, and how fast?

    .venv/bin/python -m bench.load [--sockets 100,500,1000] [--processes 1,2] [--shared 50] [--text hello]

For each process count P it starts its own Redis, fresh SQLite database and P Server processes
(the production settings with a shared test agent, ``tests.support.settings_live``), makes the
users (each socket is a user of its own, logged in through a session made in bulk), then for each
N opens N WebSockets at once, spread round-robin over the processes, and each sends one chat
request (the demo model's echo: a short reply) to its user's own instance. ``--shared`` adds a row
where that many sockets, all at once, send their turn to one instance of a shared agent: the turns
queue there and run one after another.

Columns: completed turns; errors (refused or dropped handshakes, error frames, timeouts, by
kind); p95 time to connect (handshake to the connect frames) and to the first chunk (send of the
request → first response frame with a body); wall time of the row; the RSS of each Server after it.
"""

import argparse
import asyncio
import collections
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._stack import machine_load, p95, report, rss_mb
from tests.support.live import LiveStack, RedisServer
from tests.support.load import SETTINGS, Outcome, crowd, make_sessions

HEADERS = ["servers", "sockets", "instances", "completed", "errors", "p95 connect s", "p95 first chunk s",
           "median first chunk s", "wall s", "RSS per Server MB"]


def row(processes: int, sockets: int, instances: str, outcomes: list[Outcome], wall: float,
        rss: list[float]) -> list[Any]:
    errors = collections.Counter(o.error.split(":")[0] for o in outcomes if not o.ok)
    firsts = [o.first_chunk for o in outcomes if o.first_chunk is not None]
    connects = [o.connected for o in outcomes if o.connected is not None]
    firsts.sort()
    return [processes, sockets, instances, sum(o.ok for o in outcomes),
            ", ".join(f"{k} x{v}" for k, v in errors.items()) or "0", p95(connects), p95(firsts),
            firsts[len(firsts) // 2] if firsts else float("nan"), wall, " / ".join(f"{r:.0f}" for r in rss)]


def run(processes: int, counts: list[int], shared: int, text: str, workdir_prefix: str) -> list[list[Any]]:
    workdir = Path(tempfile.mkdtemp(prefix=workdir_prefix))
    redis = RedisServer(workdir)
    stack = LiveStack(workdir, redis.url, extra_env={"DJANGO_SETTINGS_MODULE": SETTINGS,
                                                     "AGENT_LOG_LEVEL": "WARNING"})
    rows = []
    try:
        daphnes = [stack.start_server() for _ in range(processes)]
        bases = [d.ws for d in daphnes]
        pids = [d.proc.pid for d in daphnes]
        for count in [*counts, *([shared] if shared else [])]:
            on_one = count == shared and len(rows) == len(counts)
            cookies = make_sessions(stack, count, prefix=f"u{len(rows)}x")
            started = time.monotonic()
            outcomes = asyncio.run(crowd(bases, cookies, shared_room=f"room{len(rows)}" if on_one else None,
                                         text=text, prefix=f"row{len(rows)}"))
            wall = time.monotonic() - started
            rows.append(row(processes, count, "1 (shared)" if on_one else str(count), outcomes, wall,
                            [rss_mb([pid]) for pid in pids]))
            print(f"  {processes} server(s), {count} sockets: {rows[-1][3]} completed, {rows[-1][4]} errors",
                  flush=True)
            for error in sorted({o.error for o in outcomes if not o.ok})[:5]:
                print(f"    e.g. {error[:300]}", flush=True)
    finally:
        stack.stop()
        redis.stop()
        _server_errors(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def _server_errors(workdir: Path) -> None:
    """The last line of each traceback the servers logged (what a 1011 close was), counted."""
    errors: collections.Counter[str] = collections.Counter()
    for log in workdir.glob("server-*.log"):
        lines = log.read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if line.startswith("Traceback"):
                end = next((j for j in range(i + 1, len(lines)) if lines[j].strip()
                            and not lines[j].startswith((" ", "Traceback", "During", "The above"))), None)
                if end is not None:
                    errors[lines[end][:200]] += 1
    for error, count in errors.most_common(5):
        print(f"  server log: {count} x {error}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sockets", default="100,500,1000", help="comma-separated socket counts")
    parser.add_argument("--processes", default="1,2", help="comma-separated Server counts")
    parser.add_argument("--shared", type=int, default=50, help="sockets on one shared instance (0: no such row)")
    parser.add_argument("--text", default="hello", help="the user message (the demo model echoes it)")
    args = parser.parse_args()
    counts = [int(n) for n in args.sockets.split(",")]
    print(f"machine before: {machine_load()}")
    rows = []
    for processes in (int(p) for p in args.processes.split(",")):
        rows += run(processes, counts, args.shared, args.text, "think-load-")
    report("Concurrent sockets, one turn each (bench/load.py)", HEADERS, rows)


if __name__ == "__main__":
    main()
