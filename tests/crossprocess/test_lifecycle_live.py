"""The connection hooks and ``destroy()`` through real servers and a real WebSocket client
(docs/architecture.md#connection-hooks, #destroy), on uvicorn and Daphne.

* The reference's ``onConnect`` may close a connection with a code and a reason: the client gets both.
* The reference's ``destroy()`` closes the agent's sockets. Here it is called in another process
  (``manage.py shell``), so the close reaches the server's sockets through Redis.
"""

import asyncio
import contextlib
import json
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from tests.support.frames import chat_request, is_done, user_message
from tests.support.live import SERVERS, LiveStack, RedisServer
from tests.support.wsclient import open_socket, recv_until

pytestmark = pytest.mark.crossprocess

PATIENCE = 30.0
DESTROY = """
import asyncio
from django.contrib.auth import get_user_model
from agents_app.demo.agents import DemoAgent
alice = get_user_model().objects.get(username="alice")
async def destroy():
    return await (await DemoAgent.aget("doomed", owner=alice)).destroy()
print(asyncio.run(destroy()).messages)
"""
# Daphne (4.2) sends close frames without their reason (``serverClose`` takes only the code); uvicorn sends both.
CARRIES_REASON = {"uvicorn": True, "daphne": False}


async def until_closed(sock: ClientConnection) -> tuple[int, str, list[str]]:
    """The close code and reason the server closed ``sock`` with, and the types of the frames before."""
    received = []
    with contextlib.suppress(ConnectionClosed):
        while True:
            received.append(json.loads(await asyncio.wait_for(sock.recv(), PATIENCE))["type"])
    assert sock.close_code is not None
    return sock.close_code, sock.close_reason or "", received


@pytest.mark.parametrize("server", SERVERS)
def test_a_refusal_and_a_destroy_reach_the_client_with_their_close_codes(
    tmp_path: Path, redis: RedisServer, server: str
) -> None:
    """In the reference an agent refuses a connection by closing it with a code and reason from its
    connect hook, and ``destroy()`` closes every connection and deletes the agent's stored state.
    Here, on each real server: the refusal's 4401 (and its reason, where the server can send one)
    arrives before any frame of the conversation, and a destroy clears the open chat, then closes
    it with 1000 ``destroyed`` (README, deliberate deviations) and leaves no messages behind."""
    stack = LiveStack(tmp_path, redis.url, extra_env={"DJANGO_SETTINGS_MODULE": "tests.support.settings_lifecycle"})
    try:
        stack.create_user("alice")
        live = stack.start_server(server)
        cookie = live.login("alice")

        async def refused() -> tuple[int, str, list[str]]:
            sock = await open_socket(live.ws, "/agents/greeter-agent/door?refuse=members%20only", cookie)
            return await until_closed(sock)

        reason = "members only" if CARRIES_REASON[server] else ""
        assert asyncio.run(refused()) == (4401, reason, [])  # nothing of the conversation before it

        async def destroyed() -> tuple[int, str, list[str]]:
            sock = await open_socket(live.ws, "/agents/demo-agent/doomed", cookie)
            await recv_until(sock, lambda f: f["type"] == "cf_agent_mcp_servers", timeout=PATIENCE)
            await sock.send(json.dumps(chat_request("r1", [user_message("u1", "hello")])))
            await recv_until(sock, is_done("r1"), timeout=PATIENCE)
            removed = await asyncio.to_thread(stack.manage, "shell", "--no-imports", "-c", DESTROY)
            assert removed.split()[-1] == "2"
            assert await recv_until(sock, lambda f: f["type"] == "cf_agent_chat_clear", timeout=PATIENCE)
            return await until_closed(sock)

        assert asyncio.run(destroyed()) == (1000, "destroyed" if CARRIES_REASON[server] else "", [])
        assert live.get_json("/agents/demo-agent/doomed/get-messages", cookie) == []
    finally:
        stack.stop()
