"""The demo's MCP example as ``make run`` runs it: the demo MCP server in its own process, a live
server whose demo agent declares it (``DEMO_MCP_URL``), real sockets and the REST API.

A real turn calls the server's tool through the offline demo model's ``/tool`` and the reply is
stored with the tool's output; the socket sees the server go ready with its tools; the REST API
lists the instance's servers with their state, and staff with ``manage_mcp_servers`` add and
remove runtime ones while an open socket watches each change arrive.
"""

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.demo_mcp import DemoMcpServer
from tests.support.frames import chat_request, user_message
from tests.support.live import LiveStack, RedisServer, Server
from tests.support.wsclient import RESP, open_socket, recv_json, recv_until

pytestmark = pytest.mark.crossprocess

MCP = "cf_agent_mcp_servers"
SERVER = "demo-tools"
CALL = '/tool convert_units {"value": 10, "from_unit": "km", "to_unit": "mi"}'
OUTPUT = "10 km = 6.214 mi"
TOOLS = ["convert_units", "count_words"]
# Tokens of a user without the permission, of staff with it, and of staff without it.
SEED = """
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
users = get_user_model().objects
manager = users.create_user("manager", password="pw", is_staff=True)
manager.user_permissions.add(Permission.objects.get(codename="manage_mcp_servers"))
viewer = users.create_user("viewer", password="pw", is_staff=True)
print(*(Token.objects.create(user=users.get(username=u)).key for u in ("alice", "manager", "viewer")))
"""


class Live:
    def __init__(self, stack: LiveStack, server: Server, mcp: DemoMcpServer, tokens: dict[str, str]) -> None:
        self.stack, self.server, self.mcp, self.tokens = stack, server, mcp, tokens
        self.cookie = server.login("alice")

    def api(self, method: str, path: str, user: str, body: Any = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            f"{self.server.http}{path}", method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Token {self.tokens[user]}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir: Path = tmp_path_factory.mktemp("demo-mcp")
    redis = RedisServer(workdir)
    mcp = DemoMcpServer(workdir)
    stack = LiveStack(workdir, redis.url, extra_env={"DEMO_MCP_URL": mcp.url,
                                                      "AGENT_MCP_SECRET_NAMES": "env:DEMO_TOKEN"})
    try:
        stack.create_user("alice")
        tokens = dict(zip(("alice", "manager", "viewer"), stack.manage("shell", "-c", SEED).split()[-3:], strict=True))
        yield Live(stack, stack.start_server(), mcp, tokens)
    finally:
        stack.stop()
        mcp.stop()
        redis.stop()


def servers(frame: dict[str, Any]) -> dict[str, Any]:
    assert frame["type"] == MCP
    return frame["mcp"]["servers"]


def tool_names(frame: dict[str, Any], server: str) -> list[str]:
    return sorted(tool["name"] for tool in frame["mcp"]["tools"] if tool["serverId"] == server)


async def test_the_demo_agent_calls_the_demo_mcp_tool_in_a_turn(live: Live) -> None:
    room = f"mcp-{uuid.uuid4().hex[:8]}"
    sock = await open_socket(live.server.ws, f"/agents/demo-agent/{room}", live.cookie)
    try:
        assert (await recv_json(sock))["type"] == "cf_agent_identity"
        first = await recv_json(sock)
        assert list(servers(first)) == [SERVER]
        assert servers(first)[SERVER]["server_url"] == live.mcp.url

        await sock.send(json.dumps(chat_request("r1", [user_message("u1", CALL)])))
        frames = await recv_until(sock, lambda f: f.get("type") == RESP and f.get("done"), timeout=30)
        chunks = [json.loads(f["body"]) for f in frames if f.get("type") == RESP and f.get("body")]
        calls = [c for c in chunks if c["type"] == "tool-input-available"]
        assert [(c["toolName"], c["input"]) for c in calls] == [
            ("convert_units", {"value": 10, "from_unit": "km", "to_unit": "mi"})]
        outputs = [c for c in chunks if c["type"] == "tool-output-available"]
        assert [(c["toolCallId"], c["output"]) for c in outputs] == [(calls[0]["toolCallId"], OUTPUT)]
        text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
        assert text == f"convert_units returned {OUTPUT}."

        # The turn connected this process to the server: the socket saw it ready, with its tools.
        states = [f for f in frames if f.get("type") == MCP]
        assert states, "no cf_agent_mcp_servers frame during the turn"
        ready = states[-1]
        assert servers(ready)[SERVER]["state"] == "ready"
        assert servers(ready)[SERVER]["error"] is None
        assert tool_names(ready, SERVER) == TOOLS

        stored = live.server.get_json(f"/agents/demo-agent/{room}/get-messages", live.cookie)
        [part] = [p for p in stored[-1]["parts"] if p["type"].startswith("tool-")]
        assert (part["type"], part["state"], part["output"]) == ("tool-convert_units", "output-available", OUTPUT)
    finally:
        await sock.close()


async def test_the_rest_api_lists_adds_and_removes_an_instances_servers(live: Live) -> None:
    room = f"api-{uuid.uuid4().hex[:8]}"
    base = f"/api/agents/demo-agent/{room}/mcp-servers/"
    staff_base = f"{base}?owner=alice"
    assert live.api("GET", base, "alice")[0] == 404  # not stored yet: reading is not opening

    sock = await open_socket(live.server.ws, f"/agents/demo-agent/{room}", live.cookie)
    try:
        await recv_until(sock, lambda f: f.get("type") == MCP)
        await sock.send(json.dumps(chat_request("r1", [user_message("u1", CALL)])))
        await recv_until(sock, lambda f: f.get("type") == RESP and f.get("done"), timeout=30)

        status, listed = live.api("GET", base, "alice")
        assert status == 200
        assert listed == [{"id": SERVER, "name": SERVER, "server_url": live.mcp.url, "source": "declared",
                           "state": "ready", "error": None, "tool_count": 2, "tools": TOOLS}]

        second = {"name": "second", "url": live.mcp.url, "headers": {"Authorization": "Bearer env:DEMO_TOKEN"}}
        assert live.api("POST", base, "alice", second)[0] == 403
        assert live.api("POST", staff_base, "viewer", second)[0] == 403
        status, added = live.api("POST", staff_base, "manager", second)
        assert status == 201, added
        assert (added["id"], added["source"], added["state"]) == ("second", "runtime", "not-connected")
        seen = await recv_until(sock, lambda f: f.get("type") == MCP and "second" in servers(f))
        assert list(servers(seen[-1])) == [SERVER, "second"]

        assert live.api("POST", staff_base, "manager", second)[0] == 409
        assert live.api("POST", staff_base, "manager", {**second, "name": SERVER})[0] == 409
        status, refused = live.api("POST", staff_base, "manager", {**second, "name": "third",
                                                                   "headers": {"Authorization": "Bearer s3cret"}})
        assert status == 400
        assert "not a reference" in json.dumps(refused)

        assert live.api("DELETE", f"{base}second/?owner=alice", "alice")[0] == 403
        assert live.api("DELETE", f"{base}second/?owner=alice", "manager")[0] == 204
        seen = await recv_until(sock, lambda f: f.get("type") == MCP and "second" not in servers(f))
        assert list(servers(seen[-1])) == [SERVER]
        assert live.api("DELETE", f"{base}second/?owner=alice", "manager")[0] == 404
        assert live.api("DELETE", f"{base}{SERVER}/?owner=alice", "manager")[0] == 409
        assert [s["id"] for s in live.api("GET", base, "alice")[1]] == [SERVER]
    finally:
        await sock.close()
