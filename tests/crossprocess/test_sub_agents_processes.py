"""A sub-agent's turn run by a Celery worker streams to its parent's ``chat()`` callback in Daphne.

The child (``child-1`` of ``parent-agent/p1``) is kept busy by a turn a worker runs (a scheduled
call, due at once); the parent's callable method then asks the child for a reply. That turn queues
behind the busy one, so the worker that finishes it runs it: the callback, in the server process, must still
get every chunk in order, once, then ``on_done``.
"""

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.live import LiveStack, RedisServer
from tests.support.wsclient import open_socket, recv_json

pytestmark = pytest.mark.crossprocess

PATIENCE = 60.0


async def rpc(sock: Any, call_id: str, method: str, *args: Any) -> dict[str, Any]:
    await sock.send(json.dumps({"type": "rpc", "id": call_id, "method": method, "args": list(args)}))
    while (frame := await recv_json(sock, timeout=PATIENCE)).get("id") != call_id or frame.get("type") != "rpc":
        pass
    return frame


def test_a_child_turn_run_by_a_celery_worker_streams_to_the_parent_in_daphne(tmp_path: Path,
                                                                           redis: RedisServer) -> None:
    stack = LiveStack(tmp_path, redis.url, extra_env={
        "DJANGO_SETTINGS_MODULE": "tests.support.settings_live", "AGENT_SCHEDULE_TICK_SECONDS": "1",
        "AGENT_LOG_LEVEL": "WARNING"})
    try:
        stack.create_user("alice")
        daphne = stack.start_server()
        worker = stack.start_celery_worker()
        stack.start_celery_beat()
        cookie = daphne.login("alice")

        async def scenario() -> tuple[dict[str, Any], list[dict[str, Any]]]:
            parent = await open_socket(daphne.ws, "/agents/parent-agent/p1", cookie)
            assert (await rpc(parent, "c0", "research", "warm up"))["success"]  # makes child-1
            watcher = await open_socket(daphne.ws, "/agents/parent-agent/p1/sub/child-agent/child-1", cookie)
            assert (await rpc(parent, "c1", "keep_child_busy", "/slow 40 50"))["success"]
            busy = []
            while not any('"text-delta"' in f.get("body", "") for f in busy):  # the worker's turn streams
                busy.append(await recv_json(watcher, timeout=PATIENCE))
            answer = await rpc(parent, "c2", "research", "the history of Oslo")
            for sock in (parent, watcher):
                await sock.close()
            return answer, busy

        answer, _ = asyncio.run(scenario())
    finally:
        stack.stop()
    assert answer["success"] is True, answer
    seen, request_id = answer["result"]["seen"], answer["result"]["request_id"]
    assert seen[0] == ["start", request_id] and seen[-1] == ["done"] and seen.count(["done"]) == 1
    events = [rest[0] for kind, *rest in seen if kind == "event"]
    assert [e["type"] for e in events][:2] == ["start", "start-step"]
    assert [e["type"] for e in events][-1] == "finish"
    assert "".join(e.get("delta", "") for e in events) == "(demo model, offline) You said: the history of Oslo"
    with sqlite3.connect(stack.database_url.removeprefix("sqlite:///")) as conn:
        [(ran_on,)] = conn.execute("SELECT worker FROM agents_app_turn WHERE request_id = ?", (request_id,))
    assert ran_on.split(" ")[0].endswith(f":{worker.pid}"), (ran_on, worker.pid)  # the worker, not the server process
