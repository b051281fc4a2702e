"""How fast a turn cut by ``kill -9`` carries on, and what keeping turns recoverable costs.

    .venv/bin/python -m bench.recovery [--kills 20] [--sweep 10] [--keep]

A stack of Redis, SQLite, a Celery worker and Celery beat (the recovery sweep every ``--sweep``
seconds, 10 as in production) and a surviving server. For each kill, a fresh server runs a
``/slow 400 10`` reply, a client watches it from the survivor, and the doomed server gets
``kill -9`` after a random number of words. Measured: the time from the kill to the first chunk
of the continuation on the watching client, in two ways the crash is found:

* *sweep*: nobody reconnects; the beat sweep finds the dead process (on another host the turn's
  15 s lease must run out first; here the process check finds it at the next sweep);
* *reconnect*: the client that was on the dead server reconnects to the survivor after 200 ms
  (about what ``useAgentChat``'s backoff waits) and resumes, which cuts the turn at once.

Every continued reply is checked (one assistant message, the whole text once). The heartbeat row
shows what a running turn writes to keep its lease (UPDATEs of its row per minute, counted over
a 60 s turn); a running turn writes nothing to Redis for it.
"""

import argparse
import asyncio
import json
import random
import signal
import sqlite3
import time
from typing import Any

from bench._stack import Stack, machine_load, median, p95, report
from tests.support.frames import chat_request, user_message
from tests.support.wsclient import open_socket, recv_json

WORDS = 400
PROMPT = f"/slow {WORDS} 10"
EXPECTED = "".join(f"w{i} " for i in range(WORDS))


def _continued(frame: dict[str, Any]) -> bool:
    if frame.get("type") != "cf_agent_use_chat_response" or not frame.get("continuation") or not frame.get("body"):
        return False
    return json.loads(frame["body"]).get("type") == "text-delta"


async def one_kill(stack: Stack, index: int, mode: str, rng: random.Random) -> float:
    """Seconds from ``kill -9`` to the first continued chunk on a watching client."""
    assert stack.live is not None
    survivor = stack.servers[0]
    doomed = stack.start_project({})
    path = f"/agents/demo-agent/{mode}-{index}"
    watcher = await open_socket(survivor.ws, path, stack.cookie)
    sender = await open_socket(doomed.ws, path, stack.cookie)
    await sender.send(json.dumps(chat_request(f"r{index}", [user_message(f"u{index}", PROMPT)])))
    words, target = 0, rng.randint(20, 200)
    while words < target:
        frame = await recv_json(sender, timeout=60)
        if frame.get("body") and '"text-delta"' in frame["body"]:
            words += 1
    doomed.proc.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    doomed.proc.wait(10)
    if mode == "reconnect":
        await asyncio.sleep(0.2)
        sender = await open_socket(survivor.ws, path, stack.cookie)
        await sender.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
        while (frame := await recv_json(sender, timeout=60)).get("probeId") != "p":
            pass
        if frame["type"] == "cf_agent_stream_resuming":
            await sender.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": frame["id"]}))
    while not _continued(await recv_json(watcher, timeout=120)):
        pass
    first = time.perf_counter() - killed
    while (frame := await recv_json(watcher, timeout=120)).get("type") != "cf_agent_chat_recovering":
        pass
    history = survivor.get_json(f"{path}/get-messages", stack.cookie)
    text = "".join(p.get("text", "") for p in history[-1]["parts"] if p["type"] == "text")
    if [m["role"] for m in history] != ["user", "assistant"] or text != EXPECTED:
        raise AssertionError(f"kill {index} ({mode}): the continued reply is wrong: {history}")
    for sock in (watcher, sender):
        await sock.close()
    return first


def heartbeat_writes_per_minute(stack: Stack) -> float:
    """UPDATEs of one running turn's row per minute: distinct ``heartbeat_at`` values over 60 s."""
    assert stack.live is not None
    database = stack.live.database_url.removeprefix("sqlite:///")

    async def turn() -> float:
        sock = await open_socket(stack.servers[0].ws, "/agents/demo-agent/heartbeat", stack.cookie)
        await sock.send(json.dumps(chat_request("hb", [user_message("uhb", "/slow 1300 50")])))
        seen: set[str] = set()
        started = time.monotonic()
        while time.monotonic() - started < 60:
            with sqlite3.connect(database, timeout=30) as conn:
                row = conn.execute("SELECT heartbeat_at FROM agents_app_turn WHERE request_id = 'hb'").fetchone()
            if row and row[0]:
                seen.add(row[0])
            await asyncio.sleep(0.25)
        await sock.close()
        return len(seen) * 60 / (time.monotonic() - started)

    return asyncio.run(turn())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="kills per mode (default 20)")
    parser.add_argument("--sweep", type=float, default=10.0, help="seconds between recovery sweeps (default 10)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    print(f"load before: {machine_load()}")
    rng = random.Random(2026)
    env = {"AGENT_RECOVERY_SWEEP_SECONDS": str(args.sweep)}
    with Stack(1, keep=args.keep, extra_env=env) as stack:
        assert stack.live is not None
        stack.live.start_celery_worker()
        stack.live.start_celery_beat()
        rows = []
        for mode in ("sweep", "reconnect"):
            times = [asyncio.run(one_kill(stack, i, mode, rng)) for i in range(args.kills)]
            rows.append([mode, args.kills, f"{median(times):.2f}", f"{p95(times):.2f}", f"{max(times):.2f}",
                         f"{args.sweep:g} s"])
        report("kill -9 of the server running a turn → first continued chunk on a watching client (s)",
               ["found by", "kills", "median", "p95", "max", "sweep every"], rows)
        writes = heartbeat_writes_per_minute(stack)
        report("what a running turn writes to keep its lease", ["database UPDATEs / min", "Redis writes / min"],
               [[f"{writes:.1f}", 0]])
        # The peer has no equivalent: workerd restarts a Durable Object in place, nothing is killed.
    print(f"load after: {machine_load()}")


if __name__ == "__main__":
    main()
