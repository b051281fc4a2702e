"""What a streamed chunk costs through our stack, per provider protocol.

    .venv/bin/python -m bench.providers [--pieces 2000] [--runs 3]

The demo agent streams one reply of N text pieces on each protocol our provider code speaks: the
offline demo model (no HTTP), OpenAI Chat Completions, OpenAI's Responses API and Anthropic
Messages, the last three from the local servers the tests use (``tests/support/fake_*_server.py``),
each in a child process of its own so that its CPU is not counted. This process runs the project's
ASGI application as ``bench/turn_cost.py`` does (``WebsocketCommunicator``, the in-memory channel
layer, a fresh SQLite file): the vendor SDK parsing the SSE, pydantic-ai's stream, our encoder,
the turn engine, the stream buffer and the transcript. Per protocol it prints the median over the
runs (after one warm-up) of this process's CPU per text-delta chunk, and the turn's wall time.
The servers send as fast as they can, so wall time is CPU-bound here.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.turn_cost import _configure

# (row label, AGENT_MODEL, server class in tests/support, its module)
PROTOCOLS = [
    ("demo (no HTTP)", "demo", None),
    ("OpenAI Chat Completions", "openai-chat:gpt-4o-mini", "fake_openai_server.FakeOpenAIServer"),
    ("OpenAI Responses", "openai:gpt-5.2", "fake_responses_server.FakeResponsesServer"),
    ("Anthropic Messages", "anthropic:claude-sonnet-4-5", "fake_anthropic_server.FakeAnthropicServer"),
]


def _serve(server_path: str, pieces: int, urls: Any, stop: Any) -> None:
    """Child process: the protocol's server, answering every request with the same N-piece reply."""
    import importlib

    from tests.support.fake_provider import TextReply

    module, _, name = server_path.rpartition(".")
    cls = getattr(importlib.import_module(f"tests.support.{module}"), name)
    reply = TextReply([f"w{i} " for i in range(pieces)])
    server = cls()
    server.next_reply = lambda: reply
    with server:
        urls.put(server.base_url)
        stop.wait()


@contextmanager
def _server(server_path: str | None, pieces: int) -> Iterator[str | None]:
    if server_path is None:
        yield None
        return
    context = multiprocessing.get_context("spawn")
    urls, stop = context.Queue(), context.Event()
    child = context.Process(target=_serve, args=(server_path, pieces, urls, stop), daemon=True)
    child.start()
    try:
        yield urls.get(timeout=60)
    finally:
        stop.set()
        child.join(10)


async def _turns(spec: str, pieces: int, runs: int) -> list[dict[str, float]]:
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from tests.support.sessions import session_key
    from thinkproject.asgi import application

    def login() -> str:
        user, _ = get_user_model().objects.get_or_create(username="bench")
        return session_key(user)

    key = await database_sync_to_async(login)()
    headers = [(b"origin", b"http://localhost"), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={key}".encode())]
    rows = []
    for run in range(runs + 1):
        room = f"{spec.replace(':', '-')}-{run}"
        ws = WebsocketCommunicator(application, f"/agents/demo-agent/{room}", headers=headers)
        connected, _ = await ws.connect()
        assert connected, "the socket was refused"
        prompt = f"/burst {pieces}" if spec == "demo" else "Tell me a story"
        body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": prompt}]}],
                "trigger": "submit-message"}
        frame = {"type": "cf_agent_use_chat_request", "id": "r1", "init": {"method": "POST", "body": json.dumps(body)}}
        cpu, wall, deltas = time.process_time(), time.perf_counter(), 0
        await ws.send_json_to(frame)
        while True:
            reply = await ws.receive_json_from(timeout=300)
            if reply.get("type") != "cf_agent_use_chat_response" or reply.get("id") != "r1":
                continue
            deltas += '"text-delta"' in reply.get("body", "")
            if reply.get("done"):
                break
        rows.append({"cpu_us_per_chunk": (time.process_time() - cpu) * 1e6 / max(1, deltas),
                     "turn_ms": (time.perf_counter() - wall) * 1000, "chunks": deltas})
        await ws.disconnect()
    return rows[1:]  # the first run warms up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pieces", type=int, default=2000, help="text pieces in the reply")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())
    table = {}
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="think-providers-") as workdir:
        _configure(workdir)
        from django.test import override_settings

        for label, spec, server_path in PROTOCOLS:
            with _server(server_path, args.pieces) as url, override_settings(
                AGENT_MODEL=spec, AGENT_MODEL_BASE_URL=url, AGENT_MODEL_API_KEY="bench", AGENT_DEMO_DELAY_MS=0,
            ):
                rows = asyncio.run(_turns(spec, args.pieces, args.runs))
            table[label] = {name: statistics.median(row[name] for row in rows)
                            for name in ("cpu_us_per_chunk", "turn_ms", "chunks")}
    print(f"## bench/providers.py: one reply of {args.pieces} text pieces per protocol, "
          f"median of {args.runs} runs, one process")
    print("| protocol | CPU µs per chunk | turn ms | text-delta chunks |")
    print("|---|--:|--:|--:|")
    for label, row in table.items():
        print(f"| {label} | {row['cpu_us_per_chunk']:.0f} | {row['turn_ms']:.0f} | {row['chunks']:.0f} |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(table, out, indent=1)


if __name__ == "__main__":
    main()
