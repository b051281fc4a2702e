"""One client, one long turn: how fast does a reply stream through the server, against the stack's ceiling.

    .venv/bin/python -m bench.stream [--chunks 2000] [--runs 5]

Starts its own Redis, a fresh migrated SQLite database and a server process serving the project
(``thinkproject.asgi``), logs in a bench user, and runs ``/burst N`` turns (the demo model
streams N words with no delay) with everything the project does: Turn rows, the queue claim,
pydantic-ai, the Redis channel-layer fan-out, and the reply persisted at the end. Each run is a
fresh room (agent instance) on a fresh socket; a warm-up run is not counted.

A second project server on the same database and Redis runs with ``AGENT_STREAM_BUFFER=0``
(the reply's chunks are not stored for resumes): the row "think, stream buffer off" is the same
turn without the buffer, so the two rows show what storing costs. Their runs alternate (on, off,
on, off, ...) so that load from other processes on the machine hits both alike.

Beside it, the same client receives N frames of the same size from a second server serving
``bench.bare_asgi`` (two rows: a consumer that only sends, and one whose frames go through the
Redis layer in batches of 64 like ``agents_app.streaming.fanout``): that is the ceiling of
the server + Channels on this machine.

chunks/s = text-delta frames / (send of the request → ``done`` frame); first chunk = first
response frame with a body. Server CPU = utime+stime of the server process (all its threads)
from /proc over the run, Redis CPU likewise.
"""

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench._stack import (
    Stack,
    TurnResult,
    add_stack_arguments,
    chat_request,
    cpu_seconds,
    drain_connect_frames,
    machine_load,
    median,
    open_socket,
    p95,
    parse_env,
    report,
    timed_turn,
    user_message,
)
from tests.support.live import Server as LiveServer

AGENT_PATH = "/agents/demo-agent"
# CPU a process keeps using after the done frame (persisting, releasing the queue) is counted
# if it happens within this many seconds.
SETTLE_S = 0.3


@dataclass
class Series:
    name: str
    results: list[TurnResult] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    redis_cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)


@dataclass
class Server:
    """One row's server: where its rooms are, what it is asked, which process it is."""

    name: str
    url_of: Callable[[str], str]
    cookie: str | None
    request_of: Callable[[str], str]
    pid: int
    check_text: bool


def expected_text(n: int) -> str:
    return "".join(f"w{i} " for i in range(n))


async def one_run(server: Server, *, n: int, redis_pid: int) -> tuple[TurnResult, float, float, float]:
    """One turn on a fresh room and socket: the result, server, redis and client CPU seconds."""
    ws = await open_socket(server.url_of(f"stream-{uuid.uuid4().hex[:8]}"), server.cookie)
    try:
        await drain_connect_frames(ws)
        cpu0, redis0, client0 = cpu_seconds([server.pid]), cpu_seconds([redis_pid]), time.process_time()
        result = await timed_turn(ws, server.request_of("r1"), "r1")
        client = time.process_time() - client0
        await asyncio.sleep(SETTLE_S)
        cpu1, redis1 = cpu_seconds([server.pid]), cpu_seconds([redis_pid])
    finally:
        await ws.close()
    if result.deltas != n or result.errors or (server.check_text and result.text != expected_text(n)):
        raise RuntimeError(f"{server.name}: got {result.deltas}/{n} deltas, errors={result.errors}")
    return result, cpu1 - cpu0, redis1 - redis0, client


async def run_series(servers: list[Server], *, runs: int, warmup: int, n: int, redis_pid: int) -> list[Series]:
    """``warmup`` + ``runs`` turns per server; the servers take turns run by run."""
    out = [Series(s.name) for s in servers]
    for run in range(warmup + runs):
        for server, series in zip(servers, out, strict=True):
            result, cpu, redis, client = await one_run(server, n=n, redis_pid=redis_pid)
            if run < warmup:
                continue
            series.results.append(result)
            series.server_cpu.append(cpu)
            series.redis_cpu.append(redis)
            series.client_cpu.append(client)
            print(f"  {server.name} run {run - warmup + 1}: {result.total * 1000:.1f} ms, "
                  f"{n / result.total:.0f} chunks/s, first chunk {result.first_chunk * 1000:.1f} ms, "
                  f"server CPU {cpu:.2f} s, redis CPU {redis:.2f} s, client CPU {client:.2f} s", flush=True)
    return out


def row(series: Series, n: int) -> list[Any]:
    totals = [r.total for r in series.results]
    first = [r.first_chunk for r in series.results]
    return [
        series.name, len(totals), n, round(mean_frame_bytes(series)),
        median(totals) * 1000, p95(totals) * 1000,
        n / median(totals), n / p95(totals),
        median(first) * 1000, p95(first) * 1000,
        median(series.server_cpu), p95(series.server_cpu),
        median(series.server_cpu) / n * 1e6, median(series.redis_cpu), median(series.client_cpu),
    ]


def mean_frame_bytes(series: Series) -> float:
    return sum(r.delta_bytes for r in series.results) / max(1, sum(r.deltas for r in series.results))


HEADERS = ["server", "runs", "chunks", "frame bytes", "turn median ms", "turn p95 ms",
           "chunks/s median", "chunks/s at p95 turn", "first chunk median ms", "first chunk p95 ms",
           "server CPU s/run median", "server CPU s/run p95", "server CPU µs/chunk", "redis CPU s/run",
           "client CPU s/run"]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    n = args.chunks
    print(f"machine: {machine_load()} (other processes on the machine skew the wall times)", flush=True)
    with Stack(1, profile_dir=args.profile, extra_env=parse_env(args.env),
                   keep=args.keep) as stack:
        ours = stack.servers[0]
        unbuffered = None if args.skip_buffer_off else stack.start_project({"AGENT_STREAM_BUFFER": "0"})
        bare = stack.start_bare()
        print(f"stack up: project Server pid {ours.proc.pid} port {ours.port}"
              + (f", buffer-off Server pid {unbuffered.proc.pid} port {unbuffered.port}" if unbuffered else "")
              + f", bare Server pid {bare.proc.pid} port {bare.port}, redis pid {stack.redis_pid}, "
              f"workdir {stack.workdir}", flush=True)
        common = {"runs": args.runs, "warmup": args.warmup, "n": n, "redis_pid": stack.redis_pid}

        def ours_request(rid: str) -> str:
            return chat_request(rid, [user_message("u1", f"/burst {n}")])

        def project(name: str, daphne: LiveServer) -> Server:
            return Server(name, lambda room: f"{daphne.ws}{AGENT_PATH}/{room}", stack.cookie, ours_request,
                          daphne.proc.pid, check_text=True)

        think_servers = [project("think (/burst, persisted)", ours)]
        if unbuffered is not None:
            think_servers.append(project("think, stream buffer off", unbuffered))
        think = await run_series(think_servers, **common)
        size = round(mean_frame_bytes(think[0]))

        def bare_request(rid: str) -> str:
            return chat_request(rid, [user_message("u1", "bare")], chunks=n, frameBytes=size)

        layer, direct = await run_series([
            Server("ceiling: Channels + Redis layer", lambda room: f"{bare.ws}/layer/{room}", None,
                   bare_request, bare.proc.pid, check_text=False),
            Server("ceiling: bare Channels consumer", lambda room: f"{bare.ws}/bare/{room}", None,
                   bare_request, bare.proc.pid, check_text=False),
        ], **common)
    all_series = [*think, layer, direct]
    rows = [row(s, n) for s in all_series]
    report(f"bench/stream.py: 1 client, 1 turn of {n} text-delta chunks, {args.runs} runs "
           f"(+{args.warmup} warm-up), {time.strftime('%Y-%m-%d')}", HEADERS, rows)
    return {"headers": HEADERS, "rows": rows,
            "server_cpu_per_run": {s.name: s.server_cpu for s in all_series}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=2000, help="text-delta chunks per turn (default 2000)")
    parser.add_argument("--runs", type=int, default=5, help="measured runs per server (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs first (default 1)")
    parser.add_argument("--skip-buffer-off", action="store_true",
                        help="leave out the row of a second project Server run with AGENT_STREAM_BUFFER=0")
    add_stack_arguments(parser)
    args = parser.parse_args()
    if not (1 <= args.chunks <= 100_000 and 1 <= args.runs <= 100 and 0 <= args.warmup <= 10):
        parser.error("--chunks 1..100000, --runs 1..100, --warmup 0..10")
    out = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
