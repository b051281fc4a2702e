"""The production settings plus ``bench/_mcp_agents.py``'s two agents (``bench/mcp.py``'s servers)."""

from thinkproject.settings import *  # noqa: F403
from thinkproject.settings import AGENT_CLASSES

AGENT_CLASSES = [*AGENT_CLASSES, "bench._mcp_agents.PlainToolsAgent", "bench._mcp_agents.McpToolsAgent"]
