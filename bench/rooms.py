"""K rooms x T sequential turns of N chunks: the reference peer's workload (docs/decisions.md, "How we measure").

    .venv/bin/python -m bench.rooms [--k 1,10,50] [--turns 10] [--chunks 200] [--delay-ms 0]
                                    [--processes 1] [--peer http://127.0.0.1:8799]

Starts its own Redis, fresh SQLite database and P server processes (``--processes``, default 1),
logs in one user per room (sessions made in bulk: independent clients, so the per-user limit of
``AGENT_MAX_ACTIVE_TURNS_PER_USER`` active turns does not refuse rooms), then for each K opens K
WebSockets at once, one per room (a distinct agent instance ``/agents/demo-agent/<room>``, owned
by its user). Each room does T turns
one after the other; turn t sends the whole history, as ``useAgentChat`` does: every earlier user
message and the reassembled assistant reply, plus the new user message ``/burst N`` (the demo
model streams N words with no delay), or with ``--delay-ms MS`` ``/slow N MS`` (MS apart).

There is no load balancer here: with P processes the rooms are spread round-robin over the
processes' ports (room i → process i mod P). Every process serves every room through the shared
database and Redis, so that is what a balancer without stickiness would do.

``--peer URL`` runs the same workload, byte for byte the same client, against the reference
``AIChatAgent`` under ``wrangler dev`` (rooms ``/agents/chat-agent/<room>``; the request body
carries the peer's ``chunks``/``chunkSize``/``mode:"text"`` (and ``delayMs``) fields, which our
server stores and ignores) and prints its rows in the same table. Its server CPU is summed over the wrangler
process tree (``--peer-pids``, or found from ``<--peer-dir>/wrangler.pid``).

Definitions (the peer's): turn = send of the request → ``done``; first chunk = first response
frame with a body; chunks = ``text-delta`` frames; aggregate chunks/s = all chunks / wall time
of the row (connects included); server CPU = utime+stime of the server processes over the row.
"""

import argparse
import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidHandshake

from bench import _peer
from bench._peer import PEER_LABEL, peer_pids, ws_base
from bench._stack import (
    Stack,
    TurnResult,
    add_stack_arguments,
    assistant_message,
    chat_request,
    cpu_seconds,
    drain_connect_frames,
    machine_load,
    median,
    open_socket,
    p95,
    parse_env,
    report,
    rss_mb,
    timed_turn,
    user_message,
)

OURS_AGENT = "demo-agent"


@dataclass
class Target:
    """Where a row's rooms go, and which processes make up the server."""

    label: str
    ws_bases: list[str]
    agent: str
    # Room i's session cookie is cookies[i] (none for the peer, which has no users).
    cookies: list[str]
    server_pids: list[int]
    redis_pids: list[int]

    @classmethod
    def ours(cls, stack: Stack, rooms: int) -> "Target":
        """Our stack for up to ``rooms`` rooms: room i round-robin over the servers' ports, owned by
        a user of its own (``Stack.crowd``)."""
        n = len(stack.servers)
        return cls(f"think, {n} x {stack.server}", [d.ws for d in stack.servers], OURS_AGENT,
                   stack.crowd(rooms), [d.proc.pid for d in stack.servers], [stack.redis_pid])

    @classmethod
    def peer(cls, url: str, agent: str, pids: list[int]) -> "Target":
        return cls(PEER_LABEL, [ws_base(url)], agent, [], pids, [])

    def cookie(self, room: int) -> str | None:
        return self.cookies[room] if self.cookies else None


@dataclass
class Workload:
    k: int
    turns: int
    chunks: int
    turn_timeout: float
    run_timeout: float
    # Milliseconds between the model's chunks; 0 = a burst.
    delay_ms: int = 0

    def request(self, t: int, history: list[dict[str, Any]]) -> str:
        """Turn t's request, the same bytes for us and the peer: our demo model reads the prompt
        (``/burst N`` or ``/slow N MS``), the peer reads the body's custom fields."""
        paced = {"delayMs": self.delay_ms} if self.delay_ms else {}
        return chat_request(f"r{t}", history, chunks=self.chunks, chunkSize=4, mode="text", **paced)

    def prompt(self) -> str:
        return f"/slow {self.chunks} {self.delay_ms}" if self.delay_ms else f"/burst {self.chunks}"


async def room_worker(target: Target, wl: Workload, prefix: str, i: int,
                      results: list[tuple[int, TurnResult]], errors: list[str]) -> None:
    """Room i: T turns on one socket. A turn that fails (timeout, closed socket) ends the room."""
    history: list[dict[str, Any]] = []
    room, base = f"{prefix}-{i}", target.ws_bases[i % len(target.ws_bases)]
    try:
        ws = await open_socket(f"{base}/agents/{target.agent}/{room}", target.cookie(i))
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        errors.append(f"{room}: connect failed: {exc!r}")
        return
    try:
        await drain_connect_frames(ws)
        for t in range(wl.turns):
            history.append(user_message(f"u{t}", wl.prompt()))
            try:
                result = await timed_turn(ws, wl.request(t, history), f"r{t}", wl.turn_timeout)
            except (TimeoutError, ConnectionClosed) as exc:
                errors.append(f"{room} turn {t}: no done frame ({type(exc).__name__}: {exc}); room stopped")
                return
            if result.deltas != wl.chunks or result.errors:
                errors.append(f"{room} turn {t}: {result.deltas}/{wl.chunks} deltas {result.errors[:1]}")
            results.append((t, result))
            history.append(assistant_message(result.message_id or f"a{t}", result.text))
    finally:
        await ws.close()


async def run_row(target: Target, wl: Workload) -> dict[str, Any]:
    prefix = f"rooms-{uuid.uuid4().hex[:6]}-k{wl.k}"
    results: list[tuple[int, TurnResult]] = []
    errors: list[str] = []
    cpu0, redis0, client0 = cpu_seconds(target.server_pids), cpu_seconds(target.redis_pids), time.process_time()
    t0 = time.monotonic()
    workers = [room_worker(target, wl, prefix, i, results, errors) for i in range(wl.k)]
    try:
        await asyncio.wait_for(asyncio.gather(*workers), wl.run_timeout)
    except TimeoutError:
        errors.append(f"row not finished after {wl.run_timeout:.0f} s; cancelled")
    wall = time.monotonic() - t0
    cpu = cpu_seconds(target.server_pids) - cpu0
    totals = [r.total for _, r in results]
    first = [r.first_chunk for _, r in results]
    chunks = sum(r.deltas for _, r in results)
    row = {
        "server": target.label, "K": wl.k, "T": wl.turns, "N": wl.chunks, "delay_ms": wl.delay_ms,
        "turns": len(results),
        "turn_med_ms": median(totals) * 1000, "turn_p95_ms": p95(totals) * 1000,
        "warm_turn_med_ms": median([r.total for t, r in results if t > 0] or totals) * 1000,
        "first_chunk_med_ms": median(first) * 1000, "first_chunk_p95_ms": p95(first) * 1000,
        "chunks": chunks, "agg_chunks_per_s": chunks / wall, "wall_s": wall,
        "server_cpu_s": cpu, "server_cores": cpu / wall,
        "redis_cpu_s": cpu_seconds(target.redis_pids) - redis0 if target.redis_pids else float("nan"),
        "client_cpu_s": time.process_time() - client0,
        "server_rss_mb": rss_mb(target.server_pids), "errors": len(errors), "error_list": errors,
    }
    for e in errors[:8]:
        print(f"  error: {e}")
    if len(errors) > 8:
        print(f"  ... {len(errors) - 8} more errors")
    shown = {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items() if k != "error_list"}
    print("  " + json.dumps(shown), flush=True)
    return row


HEADERS = ["server", "K rooms", "turns", "turn median ms", "turn p95 ms", "warm turn median ms",
           "first chunk median ms", "first chunk p95 ms", "aggregate chunks/s", "wall s",
           "server CPU s", "server cores", "redis CPU s", "client CPU s", "server RSS MB", "errors"]
KEYS = ["server", "K", "turns", "turn_med_ms", "turn_p95_ms", "warm_turn_med_ms", "first_chunk_med_ms",
        "first_chunk_p95_ms", "agg_chunks_per_s", "wall_s", "server_cpu_s", "server_cores", "redis_cpu_s",
        "client_cpu_s", "server_rss_mb", "errors"]


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    ks = [int(k) for k in args.k.split(",")]
    rows: list[dict[str, Any]] = []
    print(f"machine: {machine_load()} (other processes on the machine skew the figures)", flush=True)

    def workload(k: int) -> Workload:
        return Workload(k, args.turns, args.chunks, args.turn_timeout, args.run_timeout, args.delay_ms)

    for processes in [int(p) for p in args.processes.split(",")]:
        with Stack(processes, profile_dir=args.profile, extra_env=parse_env(args.env),
                   keep=args.keep) as stack:
            target = Target.ours(stack, max(ks))
            print(f"{target.label}: pids {target.server_pids}, redis {stack.redis_pid}, "
                  f"ports {[d.port for d in stack.servers]}, workdir {stack.workdir}", flush=True)
            for k in ks:
                rows.append(await run_row(target, workload(k)))
                await asyncio.sleep(args.pause)
    if args.peer:
        target = Target.peer(args.peer, args.peer_agent, peer_pids(args.peer_dir, args.peer_pids))
        print(f"{target.label}: {args.peer}, pids {target.server_pids}", flush=True)
        for k in ks:
            rows.append(await run_row(target, workload(k)))
            await asyncio.sleep(args.pause)
    rows.sort(key=lambda r: r["K"])
    paced = f" {args.delay_ms} ms apart" if args.delay_ms else ""
    report(f"bench/rooms.py: K rooms x {args.turns} sequential turns of {args.chunks} chunks{paced}, "
           f"full history re-sent each turn, {time.strftime('%Y-%m-%d')}",
           HEADERS, [[r[k] for k in KEYS] for r in rows])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", default="1,10,50", help="room counts, comma-separated (default 1,10,50)")
    parser.add_argument("--turns", type=int, default=10, help="sequential turns per room (default 10)")
    parser.add_argument("--chunks", type=int, default=200, help="text-delta chunks per turn (default 200)")
    parser.add_argument("--delay-ms", type=int, default=0,
                        help="ms between chunks: /slow N MS and the peer's delayMs (default 0: /burst N)")
    parser.add_argument("--processes", default="1",
                        help="server processes; a comma list runs one stack per value (default 1)")
    _peer.add_arguments(parser)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between rows (default 1)")
    parser.add_argument("--turn-timeout", type=float, default=60,
                        help="seconds to wait for a turn's done frame before giving up on the room")
    parser.add_argument("--run-timeout", type=float, default=900, help="bound on one row, seconds")
    add_stack_arguments(parser)
    args = parser.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    procs = [int(p) for p in args.processes.split(",")]
    if not (all(1 <= k <= 500 for k in ks) and all(1 <= p <= 16 for p in procs)
            and 1 <= args.turns <= 1000 and 1 <= args.chunks <= 100_000 and 0 <= args.delay_ms <= 1000):
        parser.error("K in 1..500, processes in 1..16, turns in 1..1000, chunks in 1..100000, delay-ms 0..1000")
    _peer.check_arguments(parser, args)
    rows = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
