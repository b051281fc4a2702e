"""Turns started on either server process or in a Celery worker reach clients on both processes."""

import asyncio
import json

import pytest

from tests.support.frames import chat_request, is_done, text_of, user_message
from tests.support.live import SERVERS
from tests.support.wsclient import open_socket, recv_json, recv_until

pytestmark = pytest.mark.crossprocess

PATH = "/agents/demo-agent/shared-room"


async def _connect(daphne, cookie):
    sock = await open_socket(daphne.ws, PATH, cookie)
    assert (await recv_json(sock))["type"] == "cf_agent_identity"
    assert (await recv_json(sock))["type"] == "cf_agent_mcp_servers"
    return sock


async def _open_the_conversation(sock):
    """A first turn, so that the conversation has its row before the other sockets connect: a
    socket on an address with no row joins the conversation's stream only once it hears of the row,
    and a turn that ended before then reaches it as the transcript alone (docs/architecture.md)."""
    await sock.send(json.dumps(chat_request("r0", [user_message("u0", "opening")])))
    await recv_until(sock, is_done("r0"))


@pytest.mark.parametrize("server", SERVERS)
def test_turns_from_each_process_reach_both_clients(stack, server):
    """On uvicorn (production) and on Daphne (``make run``) alike."""
    alice = stack.create_user("alice")
    first, second = stack.start_server(server), stack.start_server(server)
    stack.start_celery_worker()
    cookie = first.login("alice")

    async def scenario():
        a = await _connect(first, cookie)
        await _open_the_conversation(a)
        b = await _connect(second, cookie)
        # A turn submitted on process 1 streams to the client on process 2 as well.
        history = first.get_json(f"{PATH}/get-messages", cookie)
        await a.send(json.dumps(chat_request("r1", [*history, user_message("u1", "from one")])))
        got_a = await recv_until(a, is_done("r1"))
        got_b = await recv_until(b, is_done("r1"))
        assert text_of(got_a) == text_of(got_b) == "(demo model, offline) You said: from one"
        # And the other way round.
        history = first.get_json(f"{PATH}/get-messages", cookie)
        await b.send(json.dumps(chat_request("r2", [*history, user_message("u2", "from two")])))
        got_b = await recv_until(b, is_done("r2"))
        got_a = await recv_until(a, is_done("r2"))
        assert text_of(got_a) == text_of(got_b) == "(demo model, offline) You said: from two"
        # A turn started by a Celery task (no connection involved) reaches both.
        from celery import Celery

        app = Celery(broker=stack.env["REDIS_URL"])
        app.send_task("agents_app.save_messages", args=["demo-agent", "shared-room", ["from celery"], alice])
        rid = None
        for sock in (a, b):
            frames = await recv_until(sock, lambda f: f.get("done") is True and f.get("id") != "r2", timeout=20)
            rid = rid or frames[-1]["id"]
            assert text_of(frames) == "(demo model, offline) You said: from celery"
        await a.close()
        await b.close()
        messages = first.get_json(f"{PATH}/get-messages", cookie)
        assert [m["role"] for m in messages] == ["user", "assistant"] * 4

    asyncio.run(scenario())


def test_uvicorn_workers_on_one_port_serve_one_conversation_together(stack):
    """The Deployment section's ``--workers``: sockets of one conversation land on either process."""
    stack.create_user("alice")
    server = stack.start_server("uvicorn", workers=2)
    cookie = server.login("alice")

    async def scenario():
        opener = await _connect(server, cookie)
        await _open_the_conversation(opener)
        sockets = [opener] + [await _connect(server, cookie) for _ in range(7)]
        history = server.get_json(f"{PATH}/get-messages", cookie)
        await opener.send(json.dumps(chat_request("r1", [*history, user_message("u1", "to every worker")])))
        return [text_of(await recv_until(sock, is_done("r1"))) for sock in sockets]

    texts = asyncio.run(scenario())
    assert texts == ["(demo model, offline) You said: to every worker"] * 8
