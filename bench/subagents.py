"""A parent agent fanning out to N sub-agents at once: wall time and chunks/s its callbacks get.

    .venv/bin/python -m bench.subagents [--children 1,10,50] [--chunks 200] [--keep]

A stack of Redis and SQLite (production settings, the Redis channel layer) and one Python process
in the role of a Server: it makes ``parent`` a ``DemoAgent`` and N sub-agents of it, then calls
``chat("/burst <chunks>", callback)`` on all N at once (``asyncio.gather``). Each child's turn runs
in that process and its chunks reach the callback through the channel layer, as they would from
another process (``agents_app.followers``). Measured per row: wall time from the first call to the
last ``on_done``, chunks delivered to the callbacks (every one is counted and checked: none lost,
none twice), chunks/s, and the CPU seconds of the process.
"""

import argparse
import json
import subprocess

from bench._stack import Stack, machine_load, report
from tests.support.live import PYTHON, ROOT

SCRIPT = r"""
import asyncio, json, os, sys, time

import django
django.setup()

from agents_app.demo.agents import DemoAgent

CHUNKS = int(sys.argv[1])


class Count:
    def __init__(self):
        self.events, self.deltas, self.done = 0, [], 0

    def on_event(self, chunk):
        self.events += 1
        data = json.loads(chunk)
        if data["type"] == "text-delta":
            self.deltas.append(data["delta"])

    def on_done(self):
        self.done += 1


async def fan_out(n):
    parent = await DemoAgent.aget(f"parent-{n}")
    children = [await parent.sub_agent(DemoAgent, f"child-{i}") for i in range(n)]
    counts = [Count() for _ in children]
    cpu, started = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(c.chat(f"/burst {CHUNKS}", k) for c, k in zip(children, counts)))
    wall = time.perf_counter() - started
    expected = "".join(f"w{i} " for i in range(CHUNKS))
    return {
        "children": n, "wall_s": wall, "cpu_s": time.process_time() - cpu,
        "events": sum(k.events for k in counts),
        "ok": all(r.status == "completed" for r in results) and all(
            k.done == 1 and "".join(k.deltas) == expected for k in counts),
    }


for n in map(int, sys.argv[2].split(",")):
    print(json.dumps(asyncio.run(fan_out(n))), flush=True)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--children", default="1,10,50", help="fan-out sizes (default 1,10,50)")
    parser.add_argument("--chunks", type=int, default=200, help="words of each child's /burst reply (default 200)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    print(f"load before: {machine_load()}")
    with Stack(1, keep=args.keep) as stack:
        assert stack.live is not None
        done = subprocess.run([PYTHON, "-c", SCRIPT, str(args.chunks), args.children], cwd=ROOT,
                              env={**stack.live.env, "AGENT_LOG_LEVEL": "WARNING"},
                              capture_output=True, text=True, check=False, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"the fan-out process failed:\n{done.stderr[-4000:]}")
        rows = []
        for line in done.stdout.splitlines():
            row = json.loads(line)
            rows.append([row["children"], args.chunks, f"{row['wall_s']:.2f}", row["events"],
                         f"{row['events'] / row['wall_s']:,.0f}", f"{row['cpu_s']:.2f}",
                         "yes" if row["ok"] else "NO"])
        report("a parent's chat() to N sub-agents at once (/burst per child), callbacks in one process",
               ["children", "words each", "wall s", "chunks to callbacks", "chunks/s", "CPU s",
                "all complete, in order"], rows)


if __name__ == "__main__":
    main()
