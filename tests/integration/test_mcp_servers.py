"""MCP servers as tool sources, against a real MCP server (tests/support/mcp_server.py) over
streamable HTTP and over stdio: tool calls through a turn, approvals, servers that are down or
never answer, runtime servers and the ``cf_agent_mcp_servers`` state (docs/architecture.md#mcp-servers).
"""

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.core import checks as django_checks
from django.test import override_settings

from agents_app import events, transcript
from agents_app.mcp import connections
from agents_app.mcp.servers import MCPConfigurationError, env
from agents_app.models import AgentInstance, MCPServerConfig
from tests.mcp_agents import McpLocalAgent, McpRuntimeAgent, McpWaitingAgent
from tests.support.frames import (
    chat_request,
    chunks,
    follow_continuation,
    is_done,
    receive_until,
    text_of,
    user_message,
)
from tests.support.mcp_server import McpHttpServer, free_port
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "test-token-not-a-secret"
MCP = "cf_agent_mcp_servers"


@pytest.fixture
def mcp_http(monkeypatch: pytest.MonkeyPatch) -> Iterator[McpHttpServer]:
    """The test server over streamable HTTP, guarded by a bearer token the agents read from the environment."""
    with McpHttpServer(token=TOKEN) as server:
        monkeypatch.setenv("TEST_MCP_URL", server.url)
        monkeypatch.setenv("TEST_MCP_TOKEN", TOKEN)
        yield server


@pytest.fixture(autouse=True)
async def close_connections() -> AsyncIterator[None]:
    """This test's MCP sessions are closed with its event loop."""
    yield
    await connections.close_loop()


def tool_part(message: dict[str, Any], tool_call_id: str) -> dict[str, Any]:
    return next(p for p in message["parts"] if p.get("toolCallId") == tool_call_id)


async def history(name: str) -> list[dict[str, Any]]:
    """The stored transcript of the conversation ``name``."""
    instance = await AgentInstance.objects.aget(name=name)
    return await database_sync_to_async(transcript.load)(instance)


async def opened(ws: Any, path: str) -> tuple[Any, dict[str, Any]]:
    """A connection and the MCP state it got on connect."""
    a = await ws(path)
    assert (await a.receive_json_from())["type"] == "cf_agent_identity"
    state = await a.receive_json_from()
    assert state["type"] == MCP
    return a, state["mcp"]


def last_state(frames: list[dict[str, Any]]) -> dict[str, Any]:
    return [f for f in frames if f["type"] == MCP][-1]["mcp"]


@pytest.mark.parametrize("agent", ["mcp-http-agent", "mcp-stdio-agent"])
async def test_an_mcp_tool_call_streams_through_a_turn_and_is_stored(ws, mcp_http, agent):
    a, on_connect = await opened(ws, f"/agents/{agent}/calc")
    [(server_id, entry)] = on_connect["servers"].items()
    assert entry["state"] == "not-connected" and entry["name"] == server_id
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 2, "b": 3}')]))
    frames = await receive_until(a, is_done("r1"), timeout=30)
    call = next(c for c in chunks(frames) if c["type"] == "tool-input-available")
    assert (call["toolName"], call["input"]) == ("add", {"a": 2, "b": 3})
    output = next(c for c in chunks(frames) if c["type"] == "tool-output-available")
    assert output["toolCallId"] == call["toolCallId"] and output["output"] == 5
    assert text_of(frames) == "add returned 5."
    # The connection's state reached the socket before the reply: ready, with what the server offers.
    state = last_state(frames)
    assert state["servers"][server_id]["state"] == "ready"
    assert state["servers"][server_id]["instructions"] == "Arithmetic and deployments for the tests."
    assert {t["name"] for t in state["tools"]} == {"add", "deploy", "slow", "big"}
    assert {t["serverId"] for t in state["tools"]} == {server_id}
    assert [p["name"] for p in state["prompts"]] == ["greet"]
    assert [r["uri"] for r in state["resources"]] == ["note://readme"]
    [stored] = [m for m in await history("calc") if m["role"] == "assistant"]
    part = tool_part(stored, call["toolCallId"])
    assert (part["type"], part["state"], part["output"]) == ("tool-add", "output-available", 5)


@pytest.mark.parametrize("agent", ["mcp-http-agent", "mcp-stdio-agent"])
async def test_an_mcp_tool_that_needs_approval_runs_once_approved(ws, mcp_http, agent):
    a, _ = await opened(ws, f"/agents/{agent}/approve")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool deploy {"version": "1.2"}')]))
    first = await receive_until(a, is_done("r1"), timeout=30)
    request = next(c for c in chunks(first) if c["type"] == "tool-approval-request")
    assert not any(c["type"] == "tool-output-available" for c in chunks(first))
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": request["toolCallId"], "approved": True,
                          "autoContinue": True})
    frames = await follow_continuation(a)
    assert text_of(frames) == "deploy returned deployed 1.2."
    part = tool_part((await history("approve"))[-1], request["toolCallId"])
    assert (part["state"], part["output"]) == ("output-available", "deployed 1.2")


async def test_an_mcp_tool_output_is_cut_like_any_tools(ws, mcp_http):
    a, _ = await opened(ws, "/agents/mcp-http-agent/big")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool big {"chars": 50000}')]))
    frames = await receive_until(a, is_done("r1"), timeout=30)
    output = next(c for c in chunks(frames) if c["type"] == "tool-output-available")["output"]
    assert output.startswith("x" * 100) and output.endswith("[truncated 30000 chars]")


@pytest.mark.emitted(prefixes=("mcp:", "chat:mcp:"))
async def test_a_server_that_is_down_is_marked_failed_and_the_turn_goes_on_without_it(ws, monkeypatch, emitted):
    monkeypatch.setenv("TEST_MCP_URL", f"http://127.0.0.1:{free_port()}/mcp")  # nothing listens there
    monkeypatch.setenv("TEST_MCP_TOKEN", TOKEN)
    a, _ = await opened(ws, "/agents/mcp-http-agent/down")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 2, "b": 3}')]))
    frames = await receive_until(a, is_done("r1"), timeout=30)
    assert text_of(frames) == "Unknown tool 'add'. Available: none."
    server = last_state(frames)["servers"]["tools"]
    assert server["state"] == "failed" and server["error"]
    assert ("chat:mcp:wait", {"agent": "mcp-http-agent", "name": "down", "requestId": "r1", "timeout": 10.0,
                              "pending": []}) in emitted
    [failed] = [data for name, data in emitted if name == events.MCP_CONNECT]
    assert failed["state"] == "failed" and failed["error"] == server["error"]


@pytest.fixture
def silent_listener(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A port that takes connections and never answers: an MCP server that hangs."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        monkeypatch.setenv("TEST_MCP_URL", f"http://127.0.0.1:{listener.getsockname()[1]}/mcp")
        yield listener


@pytest.mark.emitted(prefixes=("chat:mcp:", "chat:turn:"))
async def test_a_turn_waits_for_a_hanging_server_only_as_long_as_its_timeout(ws, silent_listener, emitted):
    """A turn waits for connections still opening at most its ``{"timeout": seconds}``, then runs
    without the servers not ready by then (the reference's waitForMcpConnections with a timeout)."""
    at: dict[str, float] = {}
    unsubscribe = events.subscribe(lambda name, _: at.setdefault(name, time.monotonic()))
    a, _ = await opened(ws, "/agents/mcp-waiting-agent/hang")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 1, "b": 1}')]))
    frames = await receive_until(a, is_done("r1"), timeout=30)
    unsubscribe()
    # When the events were emitted: the wait took its 1 s timeout, not the server's 60 s.
    waited = at["chat:mcp:wait"] - at["chat:turn:start"]
    assert 0.9 <= waited < 2.0, waited
    assert text_of(frames) == "Unknown tool 'add'. Available: none."
    # The turn stopped waiting at its 1 s timeout with the server still connecting (its own
    # connect timeout is 60 s), then ran.
    assert [name for name, _ in emitted][:2] == ["chat:turn:start", "chat:mcp:wait"]
    wait = emitted[1][1]
    assert (wait["timeout"], wait["pending"]) == (1.0, ["hanging"])
    assert last_state(frames)["servers"]["hanging"]["state"] == "connecting"


async def test_a_wait_that_times_out_leaves_no_waiting_task_behind(silent_listener, user):
    """A turn's wait for its connections ends at its timeout, and what it waited with ends too:
    a hanging server would otherwise keep one waiting task per turn alive until it answers."""
    instance = await AgentInstance.objects.acreate(slug="mcp-waiting-agent", name="tasks", owner=user)
    servers = await connections.open_servers(instance.pk, McpWaitingAgent(instance).get_mcp_servers())
    [connection] = servers.connections

    def waiting_on_it() -> list[asyncio.Task[Any]]:
        return [task for task in asyncio.all_tasks() if not task.done()
                and getattr(task.get_coro(), "cr_frame", None) is not None
                and task.get_coro().cr_frame.f_locals.get("self") is connection.settled]

    assert await servers.wait(0.2) == ["hanging"]
    await asyncio.sleep(0)  # a cancelled task ends at the loop's next turn
    assert waiting_on_it() == []


@pytest.mark.emitted(prefixes=("chat:mcp:", "mcp:"))
async def test_a_turn_over_its_quota_is_refused_before_any_mcp_wait_or_connection(ws, silent_listener, emitted):
    """A refused turn gets its error frame at once: it neither waits for its MCP servers nor opens
    a session to them (the quota is asked before the turn's MCP wait)."""
    with override_settings(AGENT_USAGE_QUOTAS={"agent_per_month": {"mcp-waiting-agent": 0}}):
        a, _ = await opened(ws, "/agents/mcp-waiting-agent/over")
        await a.send_json_to(chat_request("r1", [user_message("u1", "Hi")]))
        frames = await receive_until(a, is_done("r1"), timeout=30)
    [error] = [f for f in frames if f.get("error")]
    assert "Usage quota reached" in error["body"]
    assert emitted == []  # no chat:mcp:wait, no connection started


@pytest.mark.emitted(prefixes=("chat:mcp:", "chat:turn:start"))
async def test_a_turn_that_does_not_wait_goes_on_at_once(ws, silent_listener, emitted):
    a, _ = await opened(ws, "/agents/mcp-no-wait-agent/now")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 1, "b": 1}')]))
    frames = await receive_until(a, is_done("r1"), timeout=30)
    assert text_of(frames) == "Unknown tool 'add'. Available: none."
    assert [name for name, _ in emitted] == ["chat:turn:start"]  # no wait at all
    # The connection goes on opening for the next turn; the sockets hear of it.
    if not any(f["type"] == MCP for f in frames):
        frames = await receive_until(a, lambda f: f["type"] == MCP)
    assert last_state(frames)["servers"]["hanging"]["state"] == "connecting"


async def test_on_chat_message_can_wait_for_the_connections_itself(ws, mcp_http):
    a, _ = await opened(ws, "/agents/mcp-own-wait-agent/own")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 4, "b": 5}')]))
    assert text_of(await receive_until(a, is_done("r1"), timeout=30)) == "add returned 9."


async def test_a_runtime_server_reaches_every_socket_and_its_tools_join_the_turn(ws, mcp_http):
    a, before = await opened(ws, "/agents/mcp-runtime-agent/rt")
    b, _ = await opened(ws, "/agents/mcp-runtime-agent/rt")
    assert before["servers"] == {}
    handle = await McpRuntimeAgent.aget("rt", owner=await _alice())
    added = await handle.add_mcp_server("calc", mcp_http.url, headers={"Authorization": env("TEST_MCP_TOKEN",
                                                                                                 prefix="Bearer ")})
    assert added == {"id": "calc", "state": "ready", "error": None}
    for socket_ in (a, b):
        state = last_state(await receive_until(socket_, lambda f: f["type"] == MCP and
                                               f["mcp"]["servers"].get("calc", {}).get("state") == "ready"))
        assert state["servers"]["calc"]["server_url"] == mcp_http.url
        assert "add" in {t["name"] for t in state["tools"]}
    # The row holds the reference, never the token.
    row = await MCPServerConfig.objects.aget(name="calc")
    assert row.headers == {"Authorization": {"source": "env", "name": "TEST_MCP_TOKEN", "prefix": "Bearer "}}
    assert TOKEN not in json.dumps(row.headers)
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 20, "b": 22}')]))
    assert text_of(await receive_until(a, is_done("r1"), timeout=30)) == "add returned 42."
    listed = await handle.list_mcp_servers()
    assert [(s["id"], s["state"], s["declared"], len(s["tools"])) for s in listed] == [("calc", "ready", False, 4)]
    assert await handle.remove_mcp_server("calc") is True
    for socket_ in (a, b):
        await receive_until(socket_, lambda f: f["type"] == MCP and f["mcp"]["servers"] == {})
    assert await handle.remove_mcp_server("calc") is False


async def _alice() -> Any:
    from django.contrib.auth import get_user_model

    return await get_user_model().objects.aget(username="alice")


@pytest.mark.emitted(prefixes=("mcp:client:preconnect", "mcp:client:close"))
async def test_a_connection_is_reused_across_turns_and_closed_when_idle(ws, mcp_http, settings, emitted):
    a, _ = await opened(ws, "/agents/mcp-http-agent/idle")
    for number in (1, 2):
        await a.send_json_to(chat_request(f"r{number}", [user_message(f"u{number}", '/tool add {"a": 1, "b": 1}')]))
        assert text_of(await receive_until(a, is_done(f"r{number}"), timeout=30)) == "add returned 2."
    assert [name for name, _ in emitted] == ["mcp:client:preconnect"]  # one session for both turns
    settings.AGENT_MCP_IDLE_SECONDS = 0.5

    async def closed() -> bool:
        # The keeper looks again when its last wait ends; a turn's end also wakes it.
        for connection in connections.pool().connections.values():
            connection._idle.set()
        return [name for name, _ in emitted] == ["mcp:client:preconnect", "mcp:client:close"]

    await eventually(closed, "the idle session to close", timeout=10)
    assert connections.pool().connections == {}
    await a.send_json_to(chat_request("r3", [user_message("u3", '/tool add {"a": 2, "b": 2}')]))
    assert text_of(await receive_until(a, is_done("r3"), timeout=30)) == "add returned 4."
    assert [name for name, _ in emitted][-1] == "mcp:client:preconnect"  # opened again


async def test_a_runtime_server_over_sse(ws, user, monkeypatch):
    monkeypatch.setenv("TEST_MCP_TOKEN", TOKEN)
    with McpHttpServer(token=TOKEN, sse=True) as server:
        a, _ = await opened(ws, "/agents/mcp-runtime-agent/sse")
        handle = await McpRuntimeAgent.aget("sse", owner=user)
        added = await handle.add_mcp_server("calc", server.url, headers={"Authorization": env("TEST_MCP_TOKEN",
                                                                                                 prefix="Bearer ")})
        assert added["state"] == "ready", added
        assert (await handle.get_mcp_servers())["servers"]["calc"]["server_url"] == server.url
        await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 7, "b": 8}')]))
        assert text_of(await receive_until(a, is_done("r1"), timeout=30)) == "add returned 15."
        await connections.close_loop()


async def test_runtime_server_headers_are_references_never_values(user):
    handle = await McpRuntimeAgent.aget("refs", owner=user)
    with pytest.raises(MCPConfigurationError, match="references, never the secret"):
        await handle.add_mcp_server("leaky", "http://127.0.0.1:9/mcp", headers={"Authorization": "Bearer abc"},
                                    connect=False)
    with pytest.raises(MCPConfigurationError, match="needs either a url or a command"):
        await handle.add_mcp_server("nothing", "", connect=False)
    assert await handle.add_mcp_server("by-setting", "http://127.0.0.1:9/mcp", headers={"X-Key": "setting:MCP_KEY"},
                                       connect=False) == {"id": "by-setting", "state": "not-connected", "error": None}
    with pytest.raises(MCPConfigurationError, match="already has an MCP server named 'by-setting'"):
        await handle.add_mcp_server("by-setting", "http://127.0.0.1:9/mcp", connect=False)


async def test_the_system_checks_accept_the_test_agents_declarations():
    found = [m for m in django_checks.run_checks() if m.id.startswith("agents_app.") and "mcp" in m.msg.lower()]
    assert found == []


async def test_the_readme_mcp_example_runs_as_written(ws, monkeypatch, tmp_path):
    """The README's calculator: its server file written out, the agent run from the project root."""
    import re

    from tests.integration.test_readme_example import README, readme_module

    section = README.read_text().split("### MCP servers", 1)[1]
    server_code = re.findall(r"```python\n(.*?)```", section, re.S)[1]
    (tmp_path / "mcp_calc.py").write_text(server_code)
    monkeypatch.chdir(tmp_path)
    with readme_module("### MCP servers", "calc", "CalcAgent"):
        a, _ = await opened(ws, "/agents/calc-agent/default")
        await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 2, "b": 3}')]))
        assert text_of(await receive_until(a, is_done("r1"), timeout=30)) == "add returned 5."


async def test_mcp_calls_go_through_the_tool_hooks_and_a_declared_server_replaces_a_python_tool(ws, mcp_http):
    from tests.mcp_agents import AFTER_CALLS

    AFTER_CALLS.clear()
    a, _ = await opened(ws, "/agents/mcp-hook-agent/hooks")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 2, "b": 3}')]))
    assert text_of(await receive_until(a, is_done("r1"), timeout=30)) == "add returned 5."
    await a.send_json_to(chat_request("r2", [user_message("u1", '/tool add {"a": 2, "b": 3}'),
                                             user_message("u2", '/tool add {"a": 13, "b": 1}')]))
    frames = await receive_until(a, is_done("r2"), timeout=30)
    assert next(c for c in chunks(frames) if c["type"] == "tool-output-available")["output"] == "13 is unlucky"
    assert AFTER_CALLS == [("add", 5), ("add", "13 is unlucky")]


async def test_a_runtime_servers_tool_never_replaces_the_agents_own(ws, mcp_http, user):
    a, _ = await opened(ws, "/agents/mcp-local-agent/mine")
    handle = await McpLocalAgent.aget("mine", owner=user)
    added = await handle.add_mcp_server("calc", mcp_http.url,
                                        headers={"Authorization": env("TEST_MCP_TOKEN", prefix="Bearer ")})
    assert added["state"] == "ready"
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool add {"a": 1, "b": 2}')]))
    frames = await receive_until(a, is_done("r1"), timeout=30)
    assert next(c for c in chunks(frames) if c["type"] == "tool-output-available")["output"] == "local 3"
    # The server's other tools did join the turn.
    await a.send_json_to(chat_request("r2", [user_message("u1", '/tool add {"a": 1, "b": 2}'),
                                             user_message("u2", '/tool deploy {"version": "2"}')]))
    frames = await receive_until(a, is_done("r2"), timeout=30)
    assert next(c for c in chunks(frames) if c["type"] == "tool-output-available")["output"] == "deployed 2"


def test_the_system_check_warns_when_a_declared_mcp_tool_replaces_the_agents_own(settings):
    from agents_app.mcp.checks import W003, check_mcp_servers

    settings.AGENT_CLASSES = [*settings.AGENT_CLASSES, "tests.mcp_agents.McpClashAgent"]
    [warning] = [m for m in check_mcp_servers(None) if "McpClashAgent" in m.msg]
    assert warning.id == W003
    assert "'add'" in warning.msg


def test_the_system_check_refuses_a_wait_without_a_limit_and_warns_of_milliseconds(settings):
    """The reference's wait timeout is in milliseconds; ours is in seconds, and a value that is
    neither a bool nor ``{"timeout": seconds}`` would make every turn wait without a limit."""
    from agents_app.mcp.checks import E010, W004, check_mcp_servers

    settings.AGENT_CLASSES = [*settings.AGENT_CLASSES, "tests.mcp_agents.McpMillisecondsWaitAgent",
                              "tests.mcp_agents.McpUnboundedWaitAgent"]
    found = {m.msg.split(" ")[0]: m for m in check_mcp_servers(None) if "WaitAgent" in m.msg}
    assert (found["McpMillisecondsWaitAgent"].id, found["McpUnboundedWaitAgent"].id) == (W004, E010)
    assert "seconds, not milliseconds" in found["McpMillisecondsWaitAgent"].hint
    assert "'10s'" in found["McpUnboundedWaitAgent"].msg


@pytest.mark.parametrize(("wait", "ids"), [
    (True, []), (False, []), ({"timeout": 0}, []), ({"timeout": 2.5}, []), ({"timeout": 300}, []),
    ({"timeout": 301}, ["agents_app.W004"]), ({"timeout": -1}, ["agents_app.E010"]),
    ({"timeout": True}, ["agents_app.E010"]), ({"timeout": 10, "other": 1}, ["agents_app.E010"]),
    ({}, ["agents_app.E010"]), (None, ["agents_app.E010"]), (10, ["agents_app.E010"]),
])
def test_each_shape_of_wait_for_mcp_connections(wait, ids):
    from agents_app.mcp.checks import wait_problems

    assert [m.id for m in wait_problems("Agent", wait)] == ids
