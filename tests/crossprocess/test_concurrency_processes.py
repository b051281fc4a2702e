"""``message_concurrency`` decided across processes: submits for one conversation arriving on two
server processes at the same moment end as they would on one (docs/architecture.md#message-concurrency;
the decision lives in the database, ``turns.admission``). On SQLite and on PostgreSQL.
"""

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.frames import RESP, chat_request, user_message
from tests.support.live import LiveStack, RedisServer, Server, database_url
from tests.support.wsclient import open_socket, recv_json, recv_until

pytestmark = pytest.mark.crossprocess

ROUNDS = 4
PATIENCE = 30


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def two_daphnes(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Any:
    database = database_url(request, request.param, tmp_path, "concurrency")
    stack = LiveStack(tmp_path, redis.url, database,
                      extra_env={"DJANGO_SETTINGS_MODULE": "tests.support.settings_live", "AGENT_LOG_LEVEL": "WARNING"})
    try:
        stack.create_user("alice")
        yield stack, stack.start_server(), stack.start_server()
    finally:
        stack.stop()


def turns(stack: LiveStack, *request_ids: str) -> dict[str, tuple[str, int | None]]:
    """Status and submit sequence of the turns with these request ids, read from the live database."""
    query = "SELECT request_id, status, submit_sequence FROM agents_app_turn WHERE request_id IN ({})"
    url = stack.database_url
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            rows = conn.execute(query.format(",".join("?" * len(request_ids))), request_ids).fetchall()
    else:
        with psycopg.connect(url) as conn:
            rows = conn.execute(query.format(",".join(["%s"] * len(request_ids))), request_ids).fetchall()
    return {rid: (status, sequence) for rid, status, sequence in rows}


async def connect(daphne: Server, path: str, cookie: str) -> Any:
    sock = await open_socket(daphne.ws, path, cookie)
    assert (await recv_json(sock))["type"] == "cf_agent_identity"
    assert (await recv_json(sock))["type"] == "cf_agent_mcp_servers"
    return sock


def done_of(request_id: str) -> Any:
    return lambda f: f.get("type") == RESP and f.get("id") == request_id and f.get("done") is True


async def submit_together(*sends: tuple[Any, str, list[dict[str, Any]], dict[str, Any]]) -> None:
    """Send requests on several sockets at the same moment."""
    await asyncio.gather(*(sock.send(json.dumps(chat_request(rid, messages, **body)))
                           for sock, rid, messages, body in sends))


async def first_submits_together(first: Server, second: Server, cookie: str, agent: str, i: int,
                                  body: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Round ``i``: a first submit on each process to one new conversation at the same moment; the
    frames each socket got until its request's ``done``."""
    path = f"/agents/{agent}/race-{i}"
    a, b = await connect(first, path, cookie), await connect(second, path, cookie)
    await submit_together((a, f"a{i}", [user_message(f"ua{i}", "from a")], body),
                          (b, f"b{i}", [user_message(f"ub{i}", "from b")], body))
    got_a = await recv_until(a, done_of(f"a{i}"), timeout=PATIENCE)
    got_b = await recv_until(b, done_of(f"b{i}"), timeout=PATIENCE)
    await a.close()
    await b.close()
    return got_a, got_b


def test_drop_two_first_submits_on_two_processes_run_exactly_one(two_daphnes):
    stack, first, second = two_daphnes
    cookie = first.login("alice")

    async def scenario() -> None:
        for i in range(ROUNDS):
            got_a, got_b = await first_submits_together(first, second, cookie, "drop-agent", i,
                                                        {"chunkCount": 20, "chunkDelayMs": 10})
            outcomes = sorted(frames[-1].get("outcome", "completed") for frames in (got_a, got_b))
            assert outcomes == ["completed", "skipped"], (got_a[-1], got_b[-1])
            stored = turns(stack, f"a{i}", f"b{i}")
            assert len(stored) == 1 and next(iter(stored.values()))[0] == "completed", stored

    asyncio.run(scenario())


def test_latest_overlapping_submits_on_two_processes_run_only_the_newest(two_daphnes):
    stack, first, second = two_daphnes
    cookie = first.login("alice")

    async def scenario() -> None:
        for i in range(ROUNDS):
            path = f"/agents/latest-agent/race-{i}"
            a, b = await connect(first, path, cookie), await connect(second, path, cookie)
            await a.send(json.dumps(chat_request(f"r1-{i}", [user_message(f"u1-{i}", "hello")],
                                                 chunkCount=100, chunkDelayMs=20)))
            await recv_until(a, lambda f: '"c2 "' in f.get("body", ""), timeout=PATIENCE)
            await submit_together((a, f"r2-{i}", [user_message(f"u2-{i}", "from a")], {}),
                                  (b, f"r3-{i}", [user_message(f"u3-{i}", "from b")], {}))
            got_a = await recv_until(a, done_of(f"r2-{i}"), timeout=PATIENCE)
            got_b = await recv_until(b, done_of(f"r3-{i}"), timeout=PATIENCE)
            stored = turns(stack, f"r2-{i}", f"r3-{i}")
            ran = [rid for rid, (status, _) in stored.items() if status == "completed"]
            assert len(ran) == 1, stored
            newest = max(stored, key=lambda rid: stored[rid][1] or 0)
            assert ran == [newest], stored
            skipped = got_a if newest == f"r3-{i}" else got_b
            assert skipped[-1]["outcome"] == "skipped"
            await a.close()
            await b.close()

    asyncio.run(scenario())


def test_queue_first_submits_on_two_processes_both_run_one_after_the_other(two_daphnes):
    """An admission that finds no other turn of the instance inserts its turn claimed
    (``admission.accept_chat``): two at the same moment on two processes neither break the
    one-running-turn rule nor reject a request; the later one queues behind the first."""
    stack, first, second = two_daphnes
    cookie = first.login("alice")

    async def scenario() -> None:
        for i in range(ROUNDS):
            got_a, got_b = await first_submits_together(first, second, cookie, "slow-stream-agent", i,
                                                        {"chunkCount": 5, "chunkDelayMs": 10})
            assert [got_a[-1].get("outcome"), got_b[-1].get("outcome")] == [None, None], (got_a[-1], got_b[-1])
            stored = turns(stack, f"a{i}", f"b{i}")
            assert {status for status, _ in stored.values()} == {"completed"} and len(stored) == 2, stored

    asyncio.run(scenario())
