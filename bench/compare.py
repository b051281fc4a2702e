"""Us against the reference ``AIChatAgent``, side by side in one run: the rows of issues 16 and 31.

    .venv/bin/python -m bench.compare [--database sqlite|postgres|both] [--only P1,P3] [--processes 2]
                                      [--json FILE]
                                      [--peer http://127.0.0.1:8799 | --peer-dir /tmp/cfpeer | --no-peer]

Starts our stack per database (``--database``, default both: Redis, a fresh SQLite file or a
PostgreSQL cluster of its own, ``--processes`` servers, a logged-in bench user:
``bench._stack.Stack``) and the peer (``bench._peer.Peer``: reuses the one running from
``--peer-dir``, else builds it there with the peer's ``setup.sh`` if needed and starts it with
``start.sh``, stopping it at the end; ``--peer URL`` uses one someone else started and leaves it
alone). wrangler's esbuild watcher (dev tooling in the peer's process tree) is paused with SIGSTOP
for the whole run and continued with SIGCONT after. Then each row runs on every side, back to
back, the side that goes first rotating from row to row, with the same client code: the rooms
client of ``bench/rooms.py`` (P1-P4, P8) and the resume client of ``bench/replay.py`` (P5),
sending the same bytes to every server (our demo model reads the prompt ``/burst N`` or
``/slow N MS``, the peer the body's ``chunks``, ``chunkSize: 4``, ``mode: "text"``, ``delayMs``).

Rows (``bench/README.md`` gives the definitions):

P1  minimal turn: 1 room, 30 sequential turns of 1 chunk: median turn ms, CPU ms per turn
P2  one room, 10 turns of 200 chunks: median turn ms
P3  50 rooms x 10 turns x 200 chunks: aggregate chunks/s, p95 turn ms
P4  50 rooms x 2 turns x 200 chunks 10 ms apart: first-chunk p95 ms, CPU µs per chunk
P5  reconnect after 2,000 of 2,600 chunks (5 ms apart): ACK → replayComplete ms
P8  200 rooms, one 200-chunk turn each: server RSS MB

Before the rows, each side serves a warm-up (``--warmup-turns``, default 3: as many rooms as we
have processes, that many turns of 20 chunks each, not counted): a fresh Python process pays for
its first turn's imports and pydantic-ai's first schemas, which P1's 30 turns would otherwise
average in (the peer gets the same warm-up).

Rooms go round-robin over our servers' ports (room i → process i mod P), as in rooms.py; P5
uses the first Server for both sockets. Errors (a turn short of its chunks, an error frame, a
missing ``done``, a replay gap or doubled chunk) are counted per row and side. Our CPU figures
with a goal count the servers, their Redis and the database's processes (on PostgreSQL every
process of its cluster, backends that exited included); the peer's count its wrangler tree.
"""

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _peer, replay, rooms
from bench._peer import PEER_SOURCE, Peer, paused_watcher, workerd_pids
from bench._stack import DATABASES, Stack, add_stack_arguments, machine_load, parse_env, rss_mb, table
from tests.support.live import ROOT

ROW_IDS = ("P1", "P2", "P3", "P4", "P5", "P8")


DATABASE_LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL"}


@dataclass
class Side:
    """One server as the row runners see it."""

    name: str  # "peer", or the database of ours: "sqlite" / "postgres"
    rooms: rooms.Target
    replay: Callable[[replay.Plan], replay.Target]
    # The other accounting of memory: ours with its Redis, the peer's workerd without wrangler's node.
    alt_rss_pids: list[int]
    # CPU seconds so far of the database processes serving this side (PostgreSQL's cluster; 0 for
    # SQLite, which runs inside the servers, and for the peer, whose storage is inside workerd).
    database_cpu: Callable[[], float] = lambda: 0.0


@dataclass
class Options:
    turn_timeout: float
    run_timeout: float
    replay_runs: int


@dataclass
class Metric:
    name: str
    key: str
    # "<=" / ">=" and the bound on ours/peer per database that issue 31 asks for; "" for a figure
    # shown for context.
    goal: str = ""
    bounds: dict[str, float] = field(default_factory=dict)


@dataclass
class Row:
    id: str
    title: str
    run: Callable[[Side, Options], Awaitable[dict[str, Any]]]
    metrics: list[Metric]
    rooms: int  # at once (each of ours owned by a user of its own)


async def rooms_row(side: Side, o: Options, k: int, turns: int, chunks: int, delay_ms: int = 0) -> dict[str, Any]:
    """A rooms.py row; ours' CPU "all" adds Redis and the database processes to the servers'."""
    wl = rooms.Workload(k, turns, chunks, o.turn_timeout, o.run_timeout, delay_ms)
    db0 = side.database_cpu()
    row = await rooms.run_row(side.rooms, wl)
    db = side.database_cpu() - db0
    turns_done, chunks_done = max(1, row["turns"]), max(1, row["chunks"])
    everything = row["server_cpu_s"] + _zero(row["redis_cpu_s"]) + db
    return {**row, "database_cpu_s": db,
            "cpu_ms_per_turn": row["server_cpu_s"] / turns_done * 1000,
            "cpu_db_ms_per_turn": db / turns_done * 1000,
            "cpu_all_ms_per_turn": everything / turns_done * 1000,
            "cpu_us_per_chunk": row["server_cpu_s"] / chunks_done * 1e6,
            "cpu_all_us_per_chunk": everything / chunks_done * 1e6}


def _zero(x: float) -> float:
    """The peer has no Redis: its nan counts as nothing."""
    return 0.0 if x != x else x


async def p1(side: Side, o: Options) -> dict[str, Any]:
    return await rooms_row(side, o, k=1, turns=30, chunks=1)


async def p2(side: Side, o: Options) -> dict[str, Any]:
    return await rooms_row(side, o, k=1, turns=10, chunks=200)


async def p3(side: Side, o: Options) -> dict[str, Any]:
    return await rooms_row(side, o, k=50, turns=10, chunks=200)


async def p4(side: Side, o: Options) -> dict[str, Any]:
    return await rooms_row(side, o, k=50, turns=2, chunks=200, delay_ms=10)


async def p5(side: Side, o: Options) -> dict[str, Any]:
    plan = replay.Plan(chunks=2600, delay_ms=5, cut=2000, runs=o.replay_runs, warmup=1)
    row = await replay.run_row(side.replay(plan), plan)
    for e in row["error_list"][:8]:
        print(f"  error: {e}")
    return row


async def p8(side: Side, o: Options) -> dict[str, Any]:
    before = rss_mb(side.rooms.server_pids)
    row = await rooms_row(side, o, k=200, turns=1, chunks=200)
    return {**row, "rss_before_mb": before, "rss_alt_mb": rss_mb(side.alt_rss_pids)}


def goal(sign: str, sqlite: float, postgres: float) -> dict[str, Any]:
    return {"goal": sign, "bounds": {"sqlite": sqlite, "postgres": postgres}}


# Issue 31's goals (ours/peer, same run): SQLite's bound, PostgreSQL's bound.
ROWS = [
    Row("P1", "minimal turn (1 chunk), 1 room, 30 turns", p1, [
        Metric("median turn ms", "turn_med_ms", **goal("<=", 1.0, 1.5)),
        Metric("CPU ms per turn: servers + Redis + database", "cpu_all_ms_per_turn", **goal("<=", 1.5, 2.0)),
        Metric("CPU ms per turn: servers only", "cpu_ms_per_turn"),
        Metric("CPU ms per turn: database processes", "cpu_db_ms_per_turn"),
    ], rooms=1),
    Row("P2", "1 room, 10 turns x 200 chunks", p2, [
        Metric("median turn ms", "turn_med_ms", **goal("<=", 0.7, 0.8)),
    ], rooms=1),
    Row("P3", "50 rooms x 10 turns x 200 chunks", p3, [
        Metric("aggregate chunks/s", "agg_chunks_per_s", **goal(">=", 2.0, 1.5)),
        Metric("p95 turn ms", "turn_p95_ms"),
        Metric("server cores used", "server_cores"),
    ], rooms=50),
    Row("P4", "50 rooms x 2 turns x 200 chunks, 10 ms apart", p4, [
        Metric("first chunk p95 ms", "first_chunk_p95_ms", **goal("<=", 0.3, 0.5)),
        Metric("CPU µs per chunk: servers + Redis + database", "cpu_all_us_per_chunk", **goal("<=", 0.7, 1.0)),
        Metric("CPU µs per chunk: servers only", "cpu_us_per_chunk"),
    ], rooms=50),
    Row("P5", "reconnect after 2,000 of 2,600 chunks (5 ms apart)", p5, [
        Metric("ACK → replayComplete median ms", "complete_med_ms", **goal("<=", 0.8, 1.0)),
        Metric("ACK → first replayed frame median ms", "first_med_ms"),
        Metric("replayed frames median", "replayed_frames_med"),
    ], rooms=1),
    Row("P8", "200 rooms, one 200-chunk turn each", p8, [
        Metric("server RSS MB (ours: servers; peer: wrangler tree)", "server_rss_mb", **goal("<=", 0.4, 0.5)),
        Metric("server RSS MB (ours: + Redis; peer: workerd only)", "rss_alt_mb"),
        Metric("server RSS MB before the row", "rss_before_mb"),
    ], rooms=200),
]


def tree() -> str:
    """The commit measured, and whether the work tree had changes on top of it."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if dirty else "")


def ratio_cells(metric: Metric, database: str, ours: float | None, peer: float | None) -> tuple[str, str, str]:
    """ours/peer, the goal, and whether it is met (ratio and verdict blank without the peer)."""
    bound = metric.bounds.get(database)
    goal_text = f"{'≤' if metric.goal == '<=' else '≥'} {bound:g}" if metric.goal and bound is not None else ""
    if ours is None or peer is None or peer == 0 or ours != ours or peer != peer:
        return "", goal_text, ""
    r = ours / peer
    if not goal_text:
        return f"{r:.2f}", "", ""
    assert bound is not None
    met = r <= bound if metric.goal == "<=" else r >= bound
    return f"{r:.2f}", goal_text, ("yes" if met else "**no**")


def render(results: list[dict[str, Any]], databases: list[str]) -> str:
    """One table: a column of figures per database and the peer's, then ratio, goal and met per
    database."""
    labels = [DATABASE_LABELS[d] for d in databases]
    headers = ["row", "metric", *labels, "peer"]
    for label in labels:
        headers += [f"{label}/peer", "goal", "met"]
    headers += [f"errors {' / '.join(labels)} / peer", "load before → after"]
    lines = []
    for res in results:
        row = next(r for r in ROWS if r.id == res["id"])
        peer = res.get("peer")
        errors = " / ".join(str(res[d]["errors"]) if res.get(d) else "" for d in [*databases, "peer"])
        for i, m in enumerate(row.metrics):
            p = peer.get(m.key) if peer else None
            ours = [res[d].get(m.key) if res.get(d) else None for d in databases]
            cells: list[Any] = [f"{row.id} {row.title}" if i == 0 else row.id, m.name,
                                *("" if o is None else o for o in ours), "" if p is None else p]
            for d, o in zip(databases, ours, strict=True):
                cells += ratio_cells(m, d, o, p)
            cells += [errors if i == 0 else "",
                      f"{res['load_before']:.2f} → {res['load_after']:.2f}" if i == 0 else ""]
            lines.append(cells)
    return table(headers, lines, left=2)


def verdict(results: list[dict[str, Any]], databases: list[str]) -> str:
    """How many goals are met, per database."""
    parts = []
    for d in databases:
        met = total = 0
        for res in results:
            row = next(r for r in ROWS if r.id == res["id"])
            for m in row.metrics:
                if not m.goal or not res.get(d) or not res.get("peer"):
                    continue
                total += 1
                met += ratio_cells(m, d, res[d].get(m.key), res["peer"].get(m.key))[2] == "yes"
        parts.append(f"{DATABASE_LABELS[d]}: {met} of {total} goals met")
    return "; ".join(parts)


async def warm_up(sides: list[Side], o: Options, rooms_count: int, turns: int) -> None:
    """Uncounted turns on every side and process before the rows (module docstring)."""
    if turns <= 0:
        return
    for side in sides:
        row = await rooms_row(side, o, k=rooms_count, turns=turns, chunks=20)
        print(f"warm-up: {side.rooms.label}: {row['turns']} turns, {row['errors']} errors", flush=True)


async def run(sides: list[Side], row_ids: list[str], o: Options, pause: float) -> list[dict[str, Any]]:
    """Each row on every side, back to back; the side that goes first rotates from row to row."""
    results = []
    for n, row in enumerate(r for r in ROWS if r.id in row_ids):
        shift = n % len(sides)
        order = sides[shift:] + sides[:shift]
        res: dict[str, Any] = {"id": row.id, "title": row.title, "load_before": os.getloadavg()[0],
                               "order": [s.name for s in order]}
        for side in order:
            print(f"{row.id} {row.title}: {side.rooms.label}", flush=True)
            res[side.name] = await row.run(side, o)
            await asyncio.sleep(pause)
        res["load_after"] = os.getloadavg()[0]
        results.append(res)
    return results


def ours_side(stack: Stack, rooms_count: int) -> Side:
    """Our stack as a side: its rooms target, P5 on its first server, its database's CPU."""
    target = rooms.Target.ours(stack, rooms_count)
    target.label += f", {DATABASE_LABELS[stack.database]}"
    first = stack.servers[0]
    print(f"ours ({stack.database}): {target.label}, pids {target.server_pids}, "
          f"ports {[d.port for d in stack.servers]}, redis {stack.redis_pid}, database {stack.database_pid}, "
          f"workdir {stack.workdir}", flush=True)
    return Side(stack.database, target,
                lambda plan: replay.Target.ours(target.label, first.ws, stack.cookie, target.server_pids, plan),
                [*target.server_pids, stack.redis_pid], stack.database_cpu)


async def main_async(args: argparse.Namespace, row_ids: list[str], databases: list[str]) -> dict[str, Any]:
    measured = tree()
    print(f"tree {measured}; machine: {machine_load()} (other processes on the machine skew the figures)",
          flush=True)
    o = Options(args.turn_timeout, args.run_timeout, args.replay_runs)
    paused: list[int] = []
    with contextlib.ExitStack() as stack_of:
        peer = None if args.no_peer else stack_of.enter_context(
            Peer(url=args.peer, peer_dir=args.peer_dir, source=args.peer_source, pid_list=args.peer_pids))
        if peer is not None and peer.note:
            print(f"peer: {peer.note}\npeer: the peer columns stay blank", flush=True)
        # Sessions for the rows' rooms and for the warm-up's (one room per process).
        rooms_count = max(args.processes, *(r.rooms for r in ROWS if r.id in row_ids))
        sides = []
        for database in databases:
            stack = stack_of.enter_context(Stack(args.processes, profile_dir=args.profile,
                                                 extra_env=parse_env(args.env), keep=args.keep, database=database))
            sides.append(ours_side(stack, rooms_count))
        if peer is not None and peer.url:
            pids = peer.pids()
            peer_url = peer.url
            sides.insert(0, Side("peer", rooms.Target.peer(peer_url, args.peer_agent, pids),
                                 lambda plan: replay.Target.peer(peer_url, args.peer_agent, lambda: pids, plan),
                                 workerd_pids(pids)))
            # Unwound before the stacks and the peer stop: the watcher runs again after the rows.
            paused = stack_of.enter_context(paused_watcher(pids))
            print(f"peer: {peer_url}, pids {pids}; wrangler's esbuild watcher paused (SIGSTOP): {paused}", flush=True)
        await warm_up(sides, o, args.processes, args.warmup_turns)
        results = await run(sides, row_ids, o, args.pause)
    text = render(results, databases)
    print()
    print(f"## bench/compare.py: us ({args.processes} x {stack.server}, "
          f"{' and '.join(DATABASE_LABELS[d] for d in databases)}) against the "
          f"reference AIChatAgent, tree {measured}, {time.strftime('%Y-%m-%d %H:%M')}")
    print(text)
    peer_line = ("The peer's CPU and timings: the wrangler tree (node, workerd) with wrangler's esbuild watcher "
                 f"paused (SIGSTOP for the run, SIGCONT after; paused: {paused or 'none found'})."
                 if any(side.name == "peer" for side in sides) else "No peer in this run.")
    print(f"\n{verdict(results, databases)}. Ours' CPU \"servers + Redis + database\": the server processes, "
          f"their Redis and, on PostgreSQL, every process of its cluster (backends that exited included). "
          f"{peer_line}")
    print(f"machine after: {machine_load()}")
    if peer is not None and peer.note:
        print(f"peer: {peer.note}")
    return {"tree": measured, "date": time.strftime("%Y-%m-%d %H:%M"), "processes": args.processes,
            "databases": databases, "watcher_paused": paused,
            "peer": None if peer is None else (peer.url or peer.note), "rows": results, "table": text}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(ROW_IDS), help="rows to run, e.g. P1,P3 (default all)")
    parser.add_argument("--processes", type=int, default=2, help="our Server processes (default 2)")
    parser.add_argument("--database", choices=[*DATABASES, "both"], default="both",
                        help="our database: sqlite, postgres (a throwaway cluster of its own), or both, "
                             "each its own stack in the same run (default both)")
    _peer.add_arguments(parser)  # without --peer: the peer of --peer-dir, started there if none runs
    parser.add_argument("--peer-source", type=Path, default=PEER_SOURCE,
                        help=f"the peer's sources, whose setup.sh builds it in --peer-dir (default {PEER_SOURCE})")
    parser.add_argument("--no-peer", action="store_true", help="ours only; the peer columns stay blank")
    parser.add_argument("--replay-runs", type=int, default=5, help="P5 measured runs per side (default 5, +1 warm-up)")
    parser.add_argument("--warmup-turns", type=int, default=3,
                        help="uncounted turns per warm-up room before the rows (default 3; 0: none)")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between sides (default 1)")
    parser.add_argument("--turn-timeout", type=float, default=60,
                        help="seconds to wait for a turn's done frame before giving up on the room (default 60)")
    parser.add_argument("--run-timeout", type=float, default=600, help="bound on one row of one side, seconds")
    add_stack_arguments(parser)
    args = parser.parse_args()
    row_ids = [r.strip().upper() for r in args.only.split(",") if r.strip()]
    if not row_ids or any(r not in ROW_IDS for r in row_ids):
        parser.error(f"--only takes rows of {', '.join(ROW_IDS)}")
    if not 1 <= args.processes <= 16 or not 1 <= args.replay_runs <= 100:
        parser.error("--processes in 1..16, --replay-runs in 1..100")
    if args.no_peer and args.peer:
        parser.error("--no-peer and --peer exclude each other")
    _peer.check_arguments(parser, args)
    databases = list(DATABASES) if args.database == "both" else [args.database]
    result = asyncio.run(main_async(args, row_ids, databases))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
