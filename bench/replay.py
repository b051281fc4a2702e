"""Reconnect mid-stream: how long does the replay of 2,000 stored chunks take?

    .venv/bin/python -m bench.replay [--runs 5] [--chunks 2600] [--delay-ms 5] [--cut 2000]
                                     [--peer http://127.0.0.1:8799]

Starts its own Redis, fresh migrated SQLite database and one server serving the project, logs in
a bench user, then for each run, in a fresh room (agent instance):

1. socket A sends ``/slow 2600 5`` (the demo model streams ``w0 w1 …`` 5 ms apart) and reads
   until it has seen ``--cut`` (2,000) text-delta frames; A stays open and is drained in the
   background until its ``done``;
2. socket B connects to the same instance; its first frame must be ``cf_agent_stream_resuming``
   with the turn's id (then identity and MCP servers);
3. B sends ``{"type":"cf_agent_stream_resume_ack","id":...}`` and reads the replayed frames
   (``replay:true``) until ``{"replay":true,"replayComplete":true}``, then the live frames
   until ``done``.

Measured: ACK → first replayed frame, ACK → ``replayComplete`` (the figure), the replayed frames
(all chunks stored so far: ``start``, ``start-step``, ``text-start`` and ≥ 2,000 deltas), frames/s
= replayed frames / (ACK → replayComplete), and the server's CPU over that window (``/proc/<pid>/task/*/schedstat``,
nanoseconds: the window is shorter than a few 10 ms ticks). The turn keeps streaming to A
meanwhile (one delta per 5 ms); its CPU rate, measured on A alone from delta cut/2 to cut, is
subtracted for the "net" column, and shown per chunk (the cost of a paced stream).

Checks: B's first frame is the resuming frame, B replays ≥ ``--cut`` deltas, replayed + live text
on B is exactly ``w0 … w2599``, and A's text too.

``--peer URL``: the same against the reference ``AIChatAgent`` under ``wrangler dev`` (rooms
``/agents/chat-agent/<room>``; the request body carries ``chunks``, ``chunkSize: 4``,
``delayMs: 5``, ``mode: "text"``; its deltas are base-36 indices ``"000 "``, ``"001 "``, …). Its
server CPU is summed over the wrangler process tree (``<--peer-dir>/wrangler.pid``).
"""

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection

from bench import _peer
from bench._peer import PEER_LABEL, peer_expected, peer_pids, ws_base
from bench._stack import (
    RESP,
    Stack,
    add_stack_arguments,
    chat_request,
    cpu_seconds_fine,
    drain_connect_frames,
    machine_load,
    median,
    open_socket,
    p95,
    parse_env,
    report,
    user_message,
)

RESUMING = "cf_agent_stream_resuming"
ACK = "cf_agent_stream_resume_ack"


@dataclass
class Plan:
    """One row: a turn of ``chunks`` deltas ``delay_ms`` apart, cut after ``cut``; runs and bounds."""

    chunks: int = 2600
    delay_ms: int = 5
    cut: int = 2000
    runs: int = 5
    warmup: int = 1
    turn_timeout: float = 90


@dataclass
class Target:
    label: str
    ws_base: str
    agent: str
    cookie: str | None
    pids: Callable[[], list[int]]
    request_of: Callable[[str], str]
    expected: str

    @classmethod
    def ours(cls, label: str, ws: str, cookie: str, pids: list[int], plan: Plan) -> "Target":
        """Our server at ``ws``: the demo model's ``/slow N MS``; ``pids`` = the server processes."""
        return cls(label, ws, "demo-agent", cookie, lambda: pids,
                   lambda rid: chat_request(rid, [user_message("u1", f"/slow {plan.chunks} {plan.delay_ms}")]),
                   ours_expected(plan.chunks))

    @classmethod
    def peer(cls, url: str, agent: str, pids: Callable[[], list[int]], plan: Plan) -> "Target":
        return cls(PEER_LABEL, ws_base(url), agent, None, pids,
                   lambda rid: chat_request(rid, [user_message("u1", "hi")], chunks=plan.chunks, chunkSize=4,
                                            mode="text", delayMs=plan.delay_ms),
                   peer_expected(plan.chunks))


@dataclass
class Run:
    ack_to_first_ms: float
    ack_to_complete_ms: float
    replayed_frames: int
    replayed_deltas: int
    server_cpu_ms: float
    background_cpu_ms: float
    live_deltas: int
    paced_us_per_chunk: float
    errors: list[str] = field(default_factory=list)


def ours_expected(n: int) -> str:
    return "".join(f"w{i} " for i in range(n))


def delta_of(frame: dict[str, Any]) -> str | None:
    body = frame.get("body")
    if not body:
        return None
    chunk = json.loads(body)
    return chunk.get("delta") if chunk.get("type") == "text-delta" else None


async def recv(ws: ClientConnection, deadline: float) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), max(0.001, deadline - time.monotonic())))


async def read_until_done(ws: ClientConnection, rid: str, deadline: float, text: list[str]) -> int:
    """Read ``ws`` until the turn's live ``done``; appends deltas to ``text``; returns the delta count."""
    deltas = 0
    while True:
        frame = await recv(ws, deadline)
        if frame.get("type") != RESP or frame.get("id") != rid:
            continue
        if frame.get("error"):
            raise RuntimeError(f"error frame: {frame}")
        if frame.get("done"):
            return deltas
        delta = delta_of(frame)
        if delta is not None:
            deltas += 1
            text.append(delta)


async def one_run(target: Target, plan: Plan) -> Run:
    rid = "r1"
    url = f"{target.ws_base}/agents/{target.agent}/replay-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + plan.turn_timeout
    errors: list[str] = []
    a = await open_socket(url, target.cookie)
    b: ClientConnection | None = None
    a_rest: asyncio.Task[int] | None = None
    try:
        await drain_connect_frames(a)
        await a.send(target.request_of(rid))
        a_text: list[str] = []
        seen = 0
        mark: tuple[float, float] | None = None  # (time, server CPU) at half the cut: background rate
        while seen < plan.cut:
            frame = await recv(a, deadline)
            if frame.get("type") != RESP or frame.get("id") != rid:
                continue
            if frame.get("done") or frame.get("error"):
                raise RuntimeError(f"turn ended after {seen} deltas, before the cut: {frame}")
            delta = delta_of(frame)
            if delta is not None:
                seen += 1
                a_text.append(delta)
                if seen == plan.cut // 2:
                    mark = (time.monotonic(), cpu_seconds_fine(target.pids()))
        assert mark is not None
        paced_cpu = cpu_seconds_fine(target.pids()) - mark[1]
        background_rate = paced_cpu / (time.monotonic() - mark[0])
        paced_us_per_chunk = paced_cpu / (plan.cut - plan.cut // 2) * 1e6
        a_rest = asyncio.ensure_future(read_until_done(a, rid, deadline, a_text))

        b = await open_socket(url, target.cookie)
        first = await recv(b, deadline)
        if first.get("type") != RESUMING or first.get("id") != rid:
            errors.append(f"B's first frame is not {RESUMING} {rid}: {first}")
        await drain_connect_frames(b)  # identity, MCP servers
        cpu0 = cpu_seconds_fine(target.pids())
        t_ack = time.monotonic()
        await b.send(json.dumps({"type": ACK, "id": rid}))
        t_first = t_complete = None
        replayed = replayed_deltas = 0
        b_text: list[str] = []
        while t_complete is None:
            frame = await recv(b, deadline)
            if frame.get("type") != RESP or frame.get("id") != rid:
                continue
            if not frame.get("replay"):
                errors.append(f"live frame before replayComplete: {str(frame)[:200]}")
                continue
            if frame.get("replayComplete"):
                t_complete = time.monotonic()
                break
            if frame.get("done"):
                raise RuntimeError(f"replay ended with done after {replayed} frames: the stream was over")
            if t_first is None:
                t_first = time.monotonic()
            replayed += 1
            delta = delta_of(frame)
            if delta is not None:
                replayed_deltas += 1
                b_text.append(delta)
        cpu1 = cpu_seconds_fine(target.pids())
        live = await read_until_done(b, rid, deadline, b_text)
        await a_rest
        window = t_complete - t_ack
        if replayed_deltas < plan.cut:
            errors.append(f"replayed {replayed_deltas} deltas, fewer than the {plan.cut} A had seen")
        if "".join(b_text) != target.expected:
            errors.append(f"B: replay + live text differs from the expected text "
                          f"({replayed_deltas} + {live} deltas, {len(''.join(b_text))} of "
                          f"{len(target.expected)} characters)")
        if "".join(a_text) != target.expected:
            errors.append(f"A: text differs from the expected text ({len(a_text)} deltas)")
        return Run(
            ack_to_first_ms=((t_first or t_complete) - t_ack) * 1000, ack_to_complete_ms=window * 1000,
            replayed_frames=replayed, replayed_deltas=replayed_deltas, server_cpu_ms=(cpu1 - cpu0) * 1000,
            background_cpu_ms=background_rate * window * 1000, live_deltas=live,
            paced_us_per_chunk=paced_us_per_chunk, errors=errors,
        )
    finally:
        if a_rest is not None and not a_rest.done():
            a_rest.cancel()
        await a.close()
        if b is not None:
            await b.close()


async def run_row(target: Target, plan: Plan) -> dict[str, Any]:
    runs: list[Run] = []
    errors: list[str] = []
    for i in range(plan.warmup + plan.runs):
        try:
            run = await asyncio.wait_for(one_run(target, plan), plan.turn_timeout + 10)
        except (TimeoutError, RuntimeError, OSError) as exc:
            errors.append(f"run {i}: {type(exc).__name__}: {exc}")
            print(f"  {target.label} run {i}: failed: {exc!r}", flush=True)
            continue
        errors += [f"run {i}: {e}" for e in run.errors]
        counted = i >= plan.warmup
        print(f"  {target.label} {'run ' + str(i - plan.warmup + 1) if counted else 'warm-up'}: "
              f"ACK→first replayed {run.ack_to_first_ms:.1f} ms, ACK→replayComplete {run.ack_to_complete_ms:.1f} ms, "
              f"{run.replayed_frames} frames ({run.replayed_deltas} deltas) replayed, {run.live_deltas} live, "
              f"server CPU {run.server_cpu_ms:.1f} ms (streaming to A ≈ {run.background_cpu_ms:.1f} ms; "
              f"{run.paced_us_per_chunk:.0f} µs/chunk before B)"
              + (f", errors: {run.errors}" if run.errors else ""), flush=True)
        if counted:
            runs.append(run)
    windows = [r.ack_to_complete_ms for r in runs]
    frames = [r.replayed_frames for r in runs]
    cpu = [r.server_cpu_ms for r in runs]
    net = [r.server_cpu_ms - r.background_cpu_ms for r in runs]
    return {
        "server": target.label, "runs": len(runs), "replayed_frames_med": median(frames),
        "replayed_frames_min": min(frames, default=float("nan")),
        "first_med_ms": median([r.ack_to_first_ms for r in runs]),
        "complete_med_ms": median(windows), "complete_p95_ms": p95(windows),
        "frames_per_s": median([f / w * 1000 for f, w in zip(frames, windows, strict=True)]),
        "frames_per_s_p95": (frames[windows.index(p95(windows))] / p95(windows) * 1000) if runs else float("nan"),
        "cpu_med_ms": median(cpu), "cpu_p95_ms": p95(cpu), "cpu_net_med_ms": median(net),
        "cpu_us_per_frame": median(net) / median(frames) * 1000 if runs else float("nan"),
        "paced_us_per_chunk": median([r.paced_us_per_chunk for r in runs]),
        "errors": len(errors), "error_list": errors,
    }


HEADERS = ["server", "runs", "replayed frames median", "replayed frames min", "ACK→first replayed median ms",
           "ACK→replayComplete median ms", "ACK→replayComplete p95 ms", "frames/s median", "frames/s at p95",
           "server CPU ms median", "server CPU ms p95", "server CPU ms net of live turn", "net CPU µs/frame",
           "live turn CPU µs/chunk (A alone)", "errors"]
KEYS = ["server", "runs", "replayed_frames_med", "replayed_frames_min", "first_med_ms", "complete_med_ms",
        "complete_p95_ms", "frames_per_s", "frames_per_s_p95", "cpu_med_ms", "cpu_p95_ms", "cpu_net_med_ms",
        "cpu_us_per_frame", "paced_us_per_chunk", "errors"]


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    n = args.chunks
    plan = Plan(n, args.delay_ms, args.cut, args.runs, args.warmup, args.turn_timeout)
    rows: list[dict[str, Any]] = []
    print(f"machine: {machine_load()} (other processes on the machine skew the wall times)", flush=True)
    if not args.skip_ours:
        with Stack(1, profile_dir=args.profile, extra_env=parse_env(args.env), keep=args.keep) as stack:
            daphne = stack.servers[0]
            print(f"stack up: project server pid {daphne.proc.pid} port {daphne.port}, "
                  f"redis pid {stack.redis_pid}, workdir {stack.workdir}", flush=True)
            target = Target.ours(f"think, 1 x {stack.server}", daphne.ws, stack.cookie, [daphne.proc.pid], plan)
            rows.append(await run_row(target, plan))
    if args.peer:
        pids = peer_pids(args.peer_dir, args.peer_pids)
        rows.append(await run_row(Target.peer(args.peer, args.peer_agent, lambda: pids, plan), plan))
    for r in rows:
        for e in r["error_list"][:10]:
            print(f"  error ({r['server']}): {e}")
    report(f"bench/replay.py: reconnect after {plan.cut} of {n} deltas ({args.delay_ms} ms apart), ACK → "
           f"replayComplete, {args.runs} runs (+{args.warmup} warm-up), {time.strftime('%Y-%m-%d')}",
           HEADERS, [[r[k] for k in KEYS] for r in rows])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=2600, help="deltas of the turn (default 2600)")
    parser.add_argument("--delay-ms", type=int, default=5, help="model delay between deltas (default 5)")
    parser.add_argument("--cut", type=int, default=2000,
                        help="deltas socket A must have seen before B connects (default 2000)")
    parser.add_argument("--runs", type=int, default=5, help="measured runs per server (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs first (default 1)")
    parser.add_argument("--turn-timeout", type=float, default=90, help="bound on one run, seconds (default 90)")
    _peer.add_arguments(parser)
    parser.add_argument("--skip-ours", action="store_true", help="measure only the peer")
    add_stack_arguments(parser)
    args = parser.parse_args()
    if not (1 <= args.cut < args.chunks <= 100_000 and 0 <= args.delay_ms <= 1000
            and 1 <= args.runs <= 100 and 0 <= args.warmup <= 10):
        parser.error("need 1 <= --cut < --chunks <= 100000, --delay-ms 0..1000, --runs 1..100, --warmup 0..10")
    _peer.check_arguments(parser, args)
    if args.skip_ours and not args.peer:
        parser.error("--skip-ours needs --peer")
    rows = asyncio.run(main_async(args))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
