"""Settings for the test suite: in-process channel layer, no demo delay, fast password hashing.

Tests that need several processes (``tests/crossprocess``) start real servers with the normal
settings and a real Redis instead.
"""

import os

# Before the settings read it: they refuse to start outside DEBUG without one.
os.environ.setdefault("SECRET_KEY", "tests-only-not-a-secret")

from .settings import *  # noqa: F403

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
AGENT_DEMO_DELAY_MS = 0
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = True
# No Celery worker in-process: the turn after an approval decision runs in the deciding call.
AGENT_APPROVAL_CONTINUATION = "inline"
# No Celery worker in-process either: a claimed scheduled run runs in the call that claimed it.
AGENT_SCHEDULE_RUNS = "inline"
# Nor for the recovery of a cut turn: it runs in the process that found the cut.
AGENT_RECOVERY = "inline"
# The references the tests' runtime MCP servers make (none is allowed by default).
AGENT_MCP_SECRET_NAMES = ["env:TEST_MCP_TOKEN", "env:DOCS_KEY", "setting:MCP_KEY"]
AGENT_CLASSES = [
    "agents_app.demo.agents.DemoAgent",
    "agents_app.demo.agents.ResearchAgent",
    "tests.agents.BodyEchoAgent",
    "tests.mcp_agents.McpHttpAgent",
    "tests.mcp_agents.McpStdioAgent",
    "tests.mcp_agents.McpWaitingAgent",
    "tests.mcp_agents.McpRuntimeAgent",
    "tests.mcp_agents.McpHookAgent",
    "tests.mcp_agents.McpLocalAgent",
    "tests.mcp_agents.McpNoWaitAgent",
    "tests.mcp_agents.McpOwnWaitAgent",
    "tests.agents.SilentAgent",
    "tests.agents.BrokenAgent",
    "tests.agents.ChunkAgent",
    "tests.agents.SharedRoomAgent",
    "tests.agents.ToolAgent",
    "tests.agents.GateAgent",
    "tests.agents.TailAgent",
    "tests.agents.SlowStreamAgent",
    "tests.agents.LatestAgent",
    "tests.agents.MergeAgent",
    "tests.agents.DropAgent",
    "tests.agents.DebounceAgent",
    "tests.agents.DefaultDebounceAgent",
    "tests.agents.InvalidDebounceAgent",
    "tests.agents.BoundedAgent",
    "tests.agents.StorageAgent",
    "tests.agents.OneStepAgent",
    "tests.agents.ChainAgent",
    "tests.agents.RpcAgent",
    "tests.agents.ScheduledAgent",
    "tests.agents.RecoveryAgent",
    "tests.agents.StallAgent",
    "tests.agents.ParentAgent",
    "tests.agents.ChildAgent",
    "tests.agents.ToolParentAgent",
    "tests.agents.RecordingAgent",
    "tests.agents.CustomBuildAgent",
    "tests.action_agents.ActionTestAgent",
]

# The test database in memory, named so: pytest-xdist's workers (``make test-fast``) would otherwise
# each derive a file name from NAME (pytest-django recognises only Django's own SQLite engine).
DATABASES["default"]["TEST"] = {"NAME": ":memory:"}  # noqa: F405
