"""What one MCP tool call adds to a turn: the same function as a plain server tool and through an
MCP server over streamable HTTP.

    .venv/bin/python -m bench.mcp [--turns 40] [--cold 8] [--keep]

A stack (Redis, SQLite, one server process with the production settings plus
``bench/_mcp_agents.py``) and the demo MCP server (``agents_app/demo/mcp_server.py``) in its own
process. ``PlainToolsAgent`` has ``convert_units`` as a server tool; ``McpToolsAgent`` has the
same function from the MCP server. Each turn is ``/tool convert_units {...}`` with the offline
demo model: one model request calls the tool, a second one sums its result up. Per row, over
``--turns`` turns on one socket and one instance (after one warm-up turn, so the MCP session is
open and reused, as on a busy instance):

* turn: from sending the request to its ``done`` frame;
* tool call: from the ``tool-input-available`` chunk to the ``tool-output-available`` chunk, as
  the client receives them (the call itself, plus what the engine does around any tool).

The two agents alternate, turn by turn, so that a drifting machine load weighs on both alike.

The cold row is the first turn of ``--cold`` fresh instances of ``McpToolsAgent``: the process
opens the instance's MCP session (connect, initialize, list tools, prompts and resources) before
the model's first request (``wait_for_mcp_connections``).
"""

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._stack import (
    RESP,
    Stack,
    chat_request,
    drain_connect_frames,
    machine_load,
    median,
    open_socket,
    p95,
    report,
    user_message,
)
from tests.support.demo_mcp import DemoMcpServer

CALL = '/tool convert_units {"value": 10, "from_unit": "km", "to_unit": "mi"}'
EXPECTED = "convert_units returned 10 km = 6.214 mi."
AGENTS = {"plain server tool": "plain-tools-agent", "MCP, streamable HTTP": "mcp-tools-agent"}


@dataclass
class Timing:
    turn_ms: float
    tool_ms: float


async def timed_tool_turn(ws: Any, request_id: str, timeout: float) -> Timing:
    """One ``CALL`` turn: its wall time and its tool call's, checking the reply is the expected one."""
    sent = time.monotonic()
    await ws.send(chat_request(request_id, [user_message(f"u-{request_id}", CALL)]))
    called = returned = None
    text = []
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame.get("type") != RESP or frame.get("id") != request_id:
            continue
        if frame.get("error"):
            raise RuntimeError(f"turn {request_id} failed: {frame.get('body')}")
        if frame.get("body"):
            chunk = json.loads(frame["body"])
            if chunk["type"] == "tool-input-available":
                called = time.monotonic()
            elif chunk["type"] == "tool-output-available":
                returned = time.monotonic()
            elif chunk["type"] == "text-delta":
                text.append(chunk["delta"])
        if frame.get("done"):
            break
    done = time.monotonic()
    if "".join(text) != EXPECTED or called is None or returned is None:
        raise RuntimeError(f"turn {request_id}: unexpected reply {''.join(text)!r}")
    return Timing((done - sent) * 1000, (returned - called) * 1000)


async def warm(stack: Stack, slugs: list[str], turns: int, timeout: float) -> list[list[Timing]]:
    """``turns`` turns on one instance of each agent, after one turn each that is not counted.

    The agents take turns, one turn each in a round, so that the machine's load, which drifts
    (other processes), weighs on every row alike.
    """
    sockets = [await open_socket(f"{stack.servers[0].ws}/agents/{slug}/warm-{uuid.uuid4().hex[:6]}", stack.cookie)
               for slug in slugs]
    try:
        for ws in sockets:
            await drain_connect_frames(ws)
            await timed_tool_turn(ws, "warm-up", timeout)
        timings: list[list[Timing]] = [[] for _ in slugs]
        for i in range(turns):
            for ws, row in zip(sockets, timings, strict=True):
                row.append(await timed_tool_turn(ws, f"t{i}", timeout))
        return timings
    finally:
        for ws in sockets:
            await ws.close()


async def cold(stack: Stack, slug: str, instances: int, timeout: float) -> list[Timing]:
    """The first turn of each of ``instances`` new instances."""
    timings = []
    for i in range(instances):
        ws = await open_socket(f"{stack.servers[0].ws}/agents/{slug}/cold-{uuid.uuid4().hex[:6]}", stack.cookie)
        try:
            await drain_connect_frames(ws)
            timings.append(await timed_tool_turn(ws, f"c{i}", timeout))
        finally:
            await ws.close()
    return timings


def row(label: str, timings: list[Timing]) -> list[Any]:
    turns, tools = [t.turn_ms for t in timings], [t.tool_ms for t in timings]
    return [label, len(timings), median(turns), p95(turns), median(tools), p95(tools)]


async def measure(stack: Stack, args: argparse.Namespace) -> list[list[Any]]:
    timings = await warm(stack, list(AGENTS.values()), args.turns, args.turn_timeout)
    rows = [row(label, row_timings) for label, row_timings in zip(AGENTS, timings, strict=True)]
    plain_turn, plain_tool = rows[0][2], rows[0][4]
    for current in rows[1:]:
        current[0] += f" ({current[2] - plain_turn:+.1f} ms a turn, {current[4] - plain_tool:+.1f} ms a call)"
    rows.append(row("MCP, first turn of an instance (session opened)",
                    await cold(stack, AGENTS["MCP, streamable HTTP"], args.cold, args.turn_timeout)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=40, help="counted turns per warm row (default 40)")
    parser.add_argument("--cold", type=int, default=8, help="fresh instances of the cold row (default 8)")
    parser.add_argument("--turn-timeout", type=float, default=60)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    print(f"load before: {machine_load()}")
    with tempfile.TemporaryDirectory(prefix="think-bench-mcp-") as workdir:
        mcp = DemoMcpServer(Path(workdir))
        try:
            with Stack(1, keep=args.keep, extra_env={"DJANGO_SETTINGS_MODULE": "bench._mcp_settings",
                                                     "DEMO_MCP_URL": mcp.url}) as stack:
                rows = asyncio.run(measure(stack, args))
                if args.keep:
                    print(f"kept: {stack.workdir}")
        finally:
            mcp.stop()
    report(f"one tool call, /tool convert_units with the demo model: {args.turns} warm turns per row, ms",
           ["tool", "turns", "turn median", "turn p95", "tool call median", "tool call p95"], rows)


if __name__ == "__main__":
    main()
