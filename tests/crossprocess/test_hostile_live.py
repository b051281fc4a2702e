"""Issue 17 against live Daphnes: hostile frames on PostgreSQL, and a reconnect right after a submit.

Every frame gets an answer on a socket that stays open (no 1011), nothing reaches a server log as
a traceback, and a client that drops its socket right after sending, and reconnects to the other
process, is told the turn is coming (``pending`` or ``resuming``), never ``resume_none``.
"""

import asyncio
import json
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.support.frames import chat_request, is_done, text_of, user_message
from tests.support.live import LiveStack, PostgresServer, RedisServer
from tests.support.wsclient import open_socket, recv_json, recv_until

pytestmark = pytest.mark.crossprocess

REPLACEMENT = "\ufffd"


def _database(postgres: PostgresServer) -> str:
    name = f"hostile_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres.url.rsplit("/", 1)[0] + f"/{name}"


async def _open(daphne, path, cookie):
    sock = await open_socket(daphne.ws, path, cookie)
    frames = [await recv_json(sock)]
    while frames[-1]["type"] != "cf_agent_mcp_servers":
        frames.append(await recv_json(sock))
    return sock, frames


def _tracebacks(workdir: Path) -> list[str]:
    return [line for log in workdir.glob("server-*.log") for line in log.read_text(errors="replace").splitlines()
            if "Traceback" in line]


@pytest.mark.requires_postgres
def test_hostile_frames_on_postgresql_get_answers_and_the_socket_stays_open(
        tmp_path: Path, redis: RedisServer, postgres: PostgresServer) -> None:
    stack = LiveStack(tmp_path, redis.url, _database(postgres))
    try:
        stack.create_user("mallory")
        daphne = stack.start_server()
        cookie = daphne.login("mallory")
        asyncio.run(_hostile(daphne, cookie))
    finally:
        stack.stop()
    assert _tracebacks(tmp_path) == []


async def _hostile(daphne, cookie):
    path = "/agents/demo-agent/hostile"
    sock, _ = await _open(daphne, path, cookie)
    deep = "[" * 1000 + "]" * 1000
    await sock.send('{"type": "cf_agent_state", "state": ' + deep + "}")
    assert (await recv_json(sock))["code"] == "too_deep"
    await sock.send('{"type": "cf_agent_stream_resume_request", "probeId": "p\\ud800"}')
    assert (await recv_json(sock))["probeId"] == f"p{REPLACEMENT}"
    history = []
    for number, text in enumerate(["nul \\u0000 here", "lone \\ud800 here", "fine"]):
        message = user_message(f"u{number}", "@@")
        message["parts"][0]["extra"] = {"provider": True}  # an unknown field, on every turn after
        raw = json.dumps(chat_request(f"r{number}", [*history, message])).replace("@@", text.replace("\\", "\\\\"))
        await sock.send(raw)
        frames = await recv_until(sock, is_done(f"r{number}"), timeout=30)
        assert "error" not in frames[-1], frames[-1]
        assert text_of(frames) == "(demo model, offline) You said: " + text.replace(
            "\\u0000", REPLACEMENT).replace("\\ud800", REPLACEMENT)
        history = daphne.get_json(f"{path}/get-messages", cookie)
    assert [m["parts"][0].get("extra") for m in history if m["role"] == "user"] == [{"provider": True}] * 3
    await sock.close()


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.3, 0.6])
def test_a_reconnect_right_after_a_submit_attaches_to_the_coming_turn(stack: LiveStack, delay: float) -> None:
    stack.create_user("alice")
    first, second = stack.start_server(), stack.start_server()
    cookie = first.login("alice")
    path = f"/agents/demo-agent/quick-{int(delay * 1000)}"

    async def scenario():
        sock, _ = await _open(first, path, cookie)
        await sock.send(json.dumps(chat_request("r1", [user_message("u1", "/slow 80 20")])))
        await asyncio.sleep(delay)
        await sock.close()
        other, connect_frames = await _open(second, path, cookie)
        await other.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p1"}))
        answer = await recv_until(other, lambda f: f.get("probeId") == "p1")
        words = "".join(f"w{i} " for i in range(80))
        if answer[-1]["type"] == "cf_agent_stream_resume_none":
            # A busy machine made this reconnect later than the whole turn (1.6 s): the client
            # reads the finished reply with the transcript, as useAgentChat does on connect.
            await other.close()
            history = await asyncio.to_thread(second.get_json, f"{path}/get-messages", cookie)
            assert [p.get("text") for p in history[-1]["parts"] if p["type"] == "text"] == [words], answer
            return
        assert answer[-1]["type"] in ("cf_agent_stream_pending", "cf_agent_stream_resuming"), (connect_frames, answer)
        frames = answer
        while True:
            if frames[-1]["type"] == "cf_agent_stream_resuming":
                await other.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": frames[-1]["id"]}))
            if frames[-1].get("done") is True:
                break
            frames.append(await recv_json(other, timeout=30))
        await other.close()
        assert frames[-1]["id"] == "r1"
        text = text_of([f for f in frames if f.get("id") == "r1"])
        if not text:
            # The turn ended before this connection's ACK was read: the end released it with the
            # final transcript instead of the stream (docs/protocol.md#resume-on-connect).
            final = next(f for f in reversed(frames) if f["type"] == "cf_agent_chat_messages")["messages"][-1]
            text = "".join(p.get("text", "") for p in final["parts"] if p["type"] == "text")
        # Every word once, in order, whichever way the connection caught up.
        assert text == words

    asyncio.run(scenario())
