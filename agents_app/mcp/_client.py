"""The heavy half of the MCP client: fastmcp's transports and pydantic-ai's ``MCPToolset``.

``connections`` imports this module when a connection opens, not when it is imported itself:
these packages cost a process about 44 MB and more than a second to import, which a process
whose agents have no MCP server should not pay (bench/README.md, "Tenth round"). A process whose
agents declare servers, or whose instances have runtime ones, imports it at start-up
(``connections.load_client``), so no first connection imports it on a serving event loop.
"""

from collections.abc import Awaitable, Callable
from typing import Any

from fastmcp.client.transports import ClientTransport, SSETransport, StdioTransport, StreamableHttpTransport
from pydantic_ai import RunContext
from pydantic_ai.mcp import CallToolFunc, MCPToolset

from .servers import MCPServer

ProcessToolCall = Callable[[RunContext[Any], CallToolFunc, str, dict[str, Any]], Awaitable[Any]]


def toolset(server: MCPServer, process_tool_call: ProcessToolCall) -> MCPToolset[Any]:
    """The session of a declaration (not entered yet), its calls' results through ``process_tool_call``."""
    return MCPToolset(_transport(server), id=f"mcp-{server.name}", tool_error_behavior="failed",
                      process_tool_call=process_tool_call, max_retries=0)


def _transport(server: MCPServer) -> ClientTransport:
    """The fastmcp transport of a declaration, with its secrets resolved now (``MCPConfigurationError``)."""
    if server.kind == "stdio":
        return StdioTransport(server.command, list(server.args), env={k: v.resolve() for k, v in server.env.items()},
                              cwd=server.cwd, keep_alive=False)
    headers = {k: v.resolve(runtime=server.runtime) for k, v in server.headers.items()}
    if server.kind == "sse":
        return SSETransport(server.url, headers=headers)
    return StreamableHttpTransport(server.url, headers=headers)
