"""MCP servers across real processes: two server processes on one database and Redis, a real MCP
server over streamable HTTP (docs/architecture.md#mcp-servers).

A server added at runtime through one process is used by a turn on the other, whose sockets see
the state change; a server process killed with ``kill -9`` in the middle of an MCP tool call has
the call answered as interrupted and the turn recovered on a Celery worker.
"""

import asyncio
import json
import signal
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.frames import chat_request, message_text, user_message
from tests.support.live import LiveStack, RedisServer
from tests.support.mcp_server import McpHttpServer
from tests.support.waiting import eventually, wait_until
from tests.support.wsclient import RESP, open_socket, recv_until

pytestmark = pytest.mark.crossprocess

TOKEN = "live-token-not-a-secret"
MCP = "cf_agent_mcp_servers"
PATIENCE = 60.0


@pytest.fixture
def mcp_stack(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer,
              database: str) -> Iterator[tuple[LiveStack, McpHttpServer]]:
    """Server processes on SQLite or PostgreSQL, and the MCP test server their agents reach."""
    with McpHttpServer(token=TOKEN) as mcp_server:
        stack = LiveStack(tmp_path, redis.url, database, extra_env={
            "DJANGO_SETTINGS_MODULE": "tests.support.settings_live", "TEST_MCP_URL": mcp_server.url,
            "TEST_MCP_TOKEN": TOKEN, "AGENT_RECOVERY_SWEEP_SECONDS": "1", "AGENT_LOG_LEVEL": "WARNING",
        })
        stack.create_user("alice")
        yield stack, mcp_server
        stack.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            stack.print_logs()


def is_done(request_id: str) -> Any:
    return lambda f: f.get("type") == RESP and f.get("id") == request_id and f.get("done") is True


def chunks(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(f["body"]) for f in frames if f.get("type") == RESP and f.get("body") and not f.get("done")]


def test_a_server_added_on_one_process_is_used_by_a_turn_on_another(mcp_stack: Any) -> None:
    stack, mcp_server = mcp_stack
    a, b = stack.start_server(), stack.start_server()
    cookie = a.login("alice")
    path = "/agents/mcp-runtime-agent/shared-tools"

    async def scenario() -> None:
        on_a = await open_socket(a.ws, path, cookie)
        on_b = await open_socket(b.ws, path, cookie)
        for sock in (on_a, on_b):
            connect = await recv_until(sock, lambda f: f["type"] == MCP)
            assert connect[-1]["mcp"]["servers"] == {}
        # Process A adds and connects the server, through an agent method called over A's socket.
        await on_a.send(json.dumps({"type": "rpc", "id": "c1", "method": "add_server",
                                    "args": ["calc", mcp_server.url]}))
        answer = (await recv_until(on_a, lambda f: f.get("type") == "rpc", timeout=PATIENCE))[-1]
        assert answer["result"] == {"id": "calc", "state": "ready", "error": None}, answer
        # B's socket heard of it from A's process: the server, ready, with its tools.
        ready = await recv_until(on_b, lambda f: f["type"] == MCP and
                                 f["mcp"]["servers"].get("calc", {}).get("state") == "ready", timeout=PATIENCE)
        assert "add" in {t["name"] for t in ready[-1]["mcp"]["tools"]}
        # A turn on process B opens its own connection and calls the server's tool.
        await on_b.send(json.dumps(chat_request("r1", [user_message("u1", '/tool add {"a": 40, "b": 2}')])))
        frames = await recv_until(on_b, is_done("r1"), timeout=PATIENCE)
        output = next(c for c in chunks(frames) if c["type"] == "tool-output-available")
        assert output["output"] == 42
        for sock in (on_a, on_b):
            await sock.close()

    asyncio.run(scenario())
    [reply] = [m for m in a.get_json(f"{path}/get-messages", cookie) if m["role"] == "assistant"]
    assert [p["output"] for p in reply["parts"] if p.get("toolCallId")] == [42]


def test_kill_minus_nine_in_the_middle_of_an_mcp_call_is_recovered(mcp_stack: Any) -> None:
    stack, mcp_server = mcp_stack
    doomed, survivor = stack.start_server(), stack.start_server()
    stack.start_celery_worker("a")
    stack.start_celery_beat()
    cookie = survivor.login("alice")
    path = "/agents/mcp-http-agent/cut"

    async def scenario() -> list[dict[str, Any]]:
        observer = await open_socket(survivor.ws, path, cookie)
        sender = await open_socket(doomed.ws, path, cookie)
        await sender.send(json.dumps(chat_request("r1", [user_message("u1", '/tool slow {"seconds": 60}')])))
        await recv_until(sender, lambda f: f.get("type") == RESP and f.get("body") and
                         json.loads(f["body"])["type"] == "tool-input-available", timeout=PATIENCE)
        # The frame goes out before the call is stored; the call runs only once it is (the turn
        # stores a call before it runs it). Killed while the MCP server runs it, then.
        await eventually(_running(mcp_server, "slow"), "the slow call to run on the MCP server", timeout=PATIENCE)
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
        seen = await recv_until(observer, lambda f: f.get("type") == "cf_agent_chat_recovering"
                                and not f["recovering"], timeout=PATIENCE)
        await observer.close()
        return seen

    seen = asyncio.run(scenario())
    assert {"type": "cf_agent_chat_recovering", "recovering": True, "id": "r1"} in seen
    wait_until(lambda: _settled(survivor, cookie, path), "the recovered reply to be stored", timeout=PATIENCE)
    history = survivor.get_json(f"{path}/get-messages", cookie)
    assert [m["role"] for m in history] == ["user", "assistant"]
    [call] = [p for p in history[1]["parts"] if p.get("toolCallId")]
    assert (call["type"], call["state"], call["errorText"]) == (
        "tool-slow", "output-error", "The tool call was interrupted before it finished")
    text = message_text(history[1])
    assert text == "slow failed: The tool call was interrupted before it finished."
    # Answered as interrupted, not run again: the server saw the one call the killed process made.
    assert mcp_server.started("slow") == 1


def _running(mcp_server: McpHttpServer, tool: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return mcp_server.started(tool) > 0
    return check


def _settled(server: Any, cookie: str, path: str) -> bool:
    history = server.get_json(f"{path}/get-messages", cookie)
    return len(history) == 2 and any(p["type"] == "text" for p in history[1]["parts"])
