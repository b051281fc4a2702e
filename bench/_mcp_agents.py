"""The two agents ``bench/mcp.py`` compares, alike but for where their tools run.

``PlainToolsAgent`` has the demo MCP server's functions as plain server tools, called in process;
``McpToolsAgent`` has the same functions through the demo MCP server (``DEMO_MCP_URL``), over
streamable HTTP. Neither has any other tool. ``bench/_mcp_settings.py`` serves them.
"""

from django.conf import settings

from agents_app import ChatAgent
from agents_app.demo.mcp_server import NAME, convert_units, count_words
from agents_app.mcp.servers import MCPServer


class PlainToolsAgent(ChatAgent):
    def get_tools(self) -> list[object]:
        return [convert_units, count_words]


class McpToolsAgent(ChatAgent):
    def get_mcp_servers(self) -> list[MCPServer]:
        return [MCPServer(name=NAME, url=settings.DEMO_MCP_URL)]
