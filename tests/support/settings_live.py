"""The production settings plus the test agents, for the live servers some tests start.

``LiveStack(..., extra_env={"DJANGO_SETTINGS_MODULE": "tests.support.settings_live"})``.
"""

from thinkproject.settings import *  # noqa: F403
from thinkproject.settings import AGENT_CLASSES

AGENT_CLASSES = [*AGENT_CLASSES, "tests.agents.DropAgent", "tests.agents.LatestAgent", "tests.agents.CrashAgent",
                 "tests.agents.StallAgent", "tests.agents.ParentAgent", "tests.agents.ChildAgent",
                 "tests.agents.SharedRoomAgent", "tests.agents.SlowStreamAgent",
                 "tests.mcp_agents.McpHttpAgent", "tests.mcp_agents.McpRuntimeAgent"]
# The reference the runtime MCP servers of tests/crossprocess/test_mcp_processes.py make.
AGENT_MCP_SECRET_NAMES = ["env:TEST_MCP_TOKEN"]
