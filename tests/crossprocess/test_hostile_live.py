"""Hostile clients against live servers: bad frames on PostgreSQL, broken UTF-8, a reconnect after a submit.

Every frame gets an answer on a socket that stays open (no 1011), nothing reaches a server log as
a traceback, and a client that drops its socket right after sending, and reconnects to the other
process, is told the turn is coming (``pending`` or ``resuming``), never ``resume_none``. A text
frame that is not UTF-8 is the server's to close (1007); what the consumer still had to send to
that socket is dropped without a word in the log.
"""

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.frames import chat_request, is_done, message_text, text_of, user_message
from tests.support.live import SERVERS, LiveStack, PostgresServer, RedisServer
from tests.support.wsclient import open_socket, recv_json, recv_until
from thinkproject.channel_layer import FanoutRedisChannelLayer

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


def _tracebacks(workdir: Path, *markers: str) -> list[str]:
    markers = markers or ("Traceback",)
    return [line for log in workdir.glob("server-*.log") for line in log.read_text(errors="replace").splitlines()
            if any(marker in line for marker in markers)]


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


def _reply_text(message: dict[str, Any]) -> str:
    """The text of an assistant message ("" for another role)."""
    return message_text(message) if message["role"] == "assistant" else ""


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
            # A busy machine made this reconnect later than the whole turn (1.6 s), and the client
            # reads the finished reply with the transcript, as useAgentChat does on connect; or
            # earlier than the first server's admission of the request, and the reply reaches this
            # connection of the conversation with the final transcript when the turn ends.
            history = await asyncio.to_thread(second.get_json, f"{path}/get-messages", cookie)
            if _reply_text(history[-1]) != words:
                await recv_until(other, lambda f: f["type"] == "cf_agent_chat_messages"
                                 and bool(f["messages"]) and _reply_text(f["messages"][-1]) == words, timeout=30)
            await other.close()
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
            final = next(f for f in reversed(frames) if f["type"] == "cf_agent_chat_messages")
            text = _reply_text(final["messages"][-1])
        # Every word once, in order, whichever way the connection caught up.
        assert text == words

    asyncio.run(scenario())


# A text frame whose payload is not UTF-8 (0xff never occurs in it): the server must close with 1007.
BROKEN_TEXT = b'{"type": "cf_agent_chat_clear", "x": "\xff\xfe"}'
HOSTILE_SOCKETS = 12
# How each server ends such a socket: uvicorn closes it with 1007; Daphne's autobahn drops the TCP
# connection at a protocol failure (its ``failByDrop``), which the client reads as 1006.
BROKEN_TEXT_CLOSE = {"uvicorn": 1007, "daphne": 1006}


@pytest.mark.parametrize("server_kind", SERVERS)
def test_broken_utf8_closes_the_socket_and_what_was_left_to_send_is_dropped_quietly(
        stack: LiveStack, server_kind: str) -> None:
    """Sockets of an instance whose turn streams send broken text frames, right behind frames
    that want an answer (a resume probe, an RPC call) or behind nothing (the relay of the stream
    is then what meets the closed socket). Each is closed with 1007; the server logs no traceback,
    forgets the sockets (its subscription to the instance's group goes with the last one), and
    serves the next turn as usual (Daphne drops such a socket instead: 1006)."""
    stack.create_user("alice")
    server = stack.start_server(server_kind)
    cookie = server.login("alice")
    path = "/agents/demo-agent/broken-utf8"
    words = "".join(f"w{i} " for i in range(150))

    async def hostile(number: int) -> int | None:
        sock, _ = await _open(server, path, cookie)
        if number % 3 == 0:
            await sock.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": f"p{number}"}))
        elif number % 3 == 1:
            await sock.send(json.dumps({"type": "rpc", "id": f"c{number}", "method": "getMessages", "args": []}))
        await sock.send(BROKEN_TEXT, text=True)
        await asyncio.wait_for(sock.wait_closed(), 30)
        return sock.close_code

    async def scenario() -> None:
        owner, _ = await _open(server, path, cookie)
        await owner.send(json.dumps(chat_request("r1", [user_message("u1", "/slow 150 10")])))
        streaming = await recv_until(owner, lambda f: f.get("id") == "r1" and bool(f.get("body")), timeout=30)
        codes = await asyncio.gather(*(hostile(n) for n in range(HOSTILE_SOCKETS)))
        assert codes == [BROKEN_TEXT_CLOSE[server_kind]] * HOSTILE_SOCKETS
        frames = streaming + await recv_until(owner, is_done("r1"), timeout=60)
        assert text_of(frames) == words
        await owner.close()
        # The next turn, on a fresh socket, as if nothing had happened.
        fresh, _ = await _open(server, path, cookie)
        await fresh.send(json.dumps(chat_request("r2", [user_message("u2", "fine")])))
        frames = await recv_until(fresh, is_done("r2"), timeout=30)
        assert "error" not in frames[-1], frames[-1]
        assert text_of(frames) == "(demo model, offline) You said: fine"
        await fresh.close()

    asyncio.run(scenario())
    history = server.get_json(f"{path}/get-messages", cookie)
    assert [p.get("text") for p in history[1]["parts"] if p["type"] == "text"] == [words]
    assert len(history) == 4
    assert _tracebacks(stack.workdir, "Traceback", "ClientDisconnected", "Exception in ASGI") == []
    # Every socket is gone: the server's last member of the instance's group left it, so the
    # process no longer subscribes to the group's topic.
    asyncio.run(_no_group_subscriptions(stack))


async def _no_group_subscriptions(stack: LiveStack) -> None:
    layer = FanoutRedisChannelLayer(hosts=[{"address": stack.env["REDIS_URL"]}])
    connection = layer.connection(0)
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while topics := await connection.pubsub_channels(layer.topic("agent.*")):
            assert asyncio.get_running_loop().time() < deadline, f"still subscribed: {topics}"
            await asyncio.sleep(0.1)
    finally:
        await connection.aclose()
