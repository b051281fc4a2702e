"""Agent classes of the MCP tests (listed in thinkproject/settings_test.py and tests/support/settings_live.py).

Their servers' addresses come from the environment, read when a turn starts: a test starts the
server (``tests/support/mcp_server.py``) and sets ``TEST_MCP_URL``, or the test settings of a live
stack pass it to the server processes.
"""

import os
from typing import Any

from agents_app import ChatAgent, ToolCall, ToolCallDecision, callable
from agents_app.mcp.servers import MCPServer, env
from tests.support.mcp_server import stdio_command


class McpHttpAgent(ChatAgent):
    """The test server over streamable HTTP, with a bearer token from the environment; ``deploy``
    waits for the user's approval."""

    def get_mcp_servers(self) -> list[MCPServer]:
        return [MCPServer(name="tools", url=os.environ.get("TEST_MCP_URL", "http://127.0.0.1:9/mcp"),
                          headers={"Authorization": env("TEST_MCP_TOKEN", prefix="Bearer ")},
                          needs_approval={"deploy"})]


class McpStdioAgent(ChatAgent):
    """The test server as a subprocess over stdio."""

    def get_mcp_servers(self) -> list[MCPServer]:
        command, args = stdio_command()
        return [MCPServer(name="local", command=command, args=tuple(args), needs_approval={"deploy"})]


class McpWaitingAgent(ChatAgent):
    """A server at ``TEST_MCP_URL`` that may never answer: its turns wait for it one second at most."""

    wait_for_mcp_connections = {"timeout": 1}

    def get_mcp_servers(self) -> list[MCPServer]:
        return [MCPServer(name="hanging", url=os.environ.get("TEST_MCP_URL", "http://127.0.0.1:9/mcp"),
                          connect_timeout=60)]


class McpRuntimeAgent(ChatAgent):
    """No server of its own: the tests add them at runtime (``handle.add_mcp_server``), in process
    or through this callable on a server process, with the token of ``TEST_MCP_TOKEN``."""

    @callable
    async def add_server(self, name: str, url: str) -> dict[str, Any]:
        return await self.handle.add_mcp_server(name, url, headers={"Authorization": env("TEST_MCP_TOKEN",
                                                                                         prefix="Bearer ")})


def add(a: int, b: int) -> str:
    """Add two integers, here in Python."""
    return f"local {a + b}"


# What after_tool_call saw, per tool name, in order (tests read and clear it).
AFTER_CALLS: list[tuple[str, object]] = []


class McpHookAgent(McpHttpAgent):
    """The HTTP server's tools beside a Python ``add`` of the same name (the declared server's
    replaces it), with hooks that block one call and record every output."""

    def get_tools(self) -> list[object]:
        return [add]

    async def before_tool_call(self, call: ToolCall) -> ToolCallDecision | None:
        if call.tool_name == "add" and call.input.get("a") == 13:
            return ToolCallDecision.block("13 is unlucky")
        return None

    async def after_tool_call(self, call: ToolCall, output: object) -> None:
        AFTER_CALLS.append((call.tool_name, output))


class McpLocalAgent(McpRuntimeAgent):
    """A Python ``add`` that a runtime server's ``add`` may not replace."""

    def get_tools(self) -> list[object]:
        return [add]


class McpClashAgent(ChatAgent):
    """Not served: a declaration the system check warns about (its approval names its own tool)."""

    def get_tools(self) -> list[object]:
        return [add]

    def get_mcp_servers(self) -> list[MCPServer]:
        return [MCPServer(name="tools", url="http://127.0.0.1:9/mcp", needs_approval={"add"})]


class McpNoWaitAgent(McpWaitingAgent):
    """Never waits for its server before a turn."""

    wait_for_mcp_connections = False


class McpOwnWaitAgent(McpHttpAgent):
    """Does not wait before the turn, but waits in ``on_chat_message`` for every server's tools."""

    wait_for_mcp_connections = False

    async def on_chat_message(self) -> Any:
        await self.wait_for_connections()
        return self.stream_model_reply()


class McpMillisecondsWaitAgent(McpWaitingAgent):
    """A wait ported from the reference as it stands there, in milliseconds (system check W004)."""

    wait_for_mcp_connections = {"timeout": 10000}


class McpUnboundedWaitAgent(McpWaitingAgent):
    """A wait that is neither a bool nor ``{"timeout": seconds}`` (system check E010)."""

    wait_for_mcp_connections = "10s"  # type: ignore[assignment]
