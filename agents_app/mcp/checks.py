"""System checks of the agents' MCP declarations (``manage.py check``).

E009: ``get_mcp_servers()`` returns valid, uniquely named ``MCPServer`` declarations.
W003: an MCP tool name the check can know without connecting (a server's ``needs_approval`` tool
names, under its ``tool_prefix``) is also a ``get_tools()`` or ``get_actions()`` name: the MCP
tool would replace it in every turn (docs/architecture.md#mcp-tool-names). Names only the server
knows are compared at each turn, and a clash is logged.
E010: ``wait_for_mcp_connections`` is ``True``, ``False`` or ``{"timeout": seconds >= 0}``; any
other value would make every turn wait without a limit.
W004: its timeout is above ``LONG_WAIT_SECONDS``: likely milliseconds ported from the reference
(whose ``{"timeout": 10000}`` is 10 s there, 10,000 s here).
"""

from types import SimpleNamespace
from typing import Any

from django.core.checks import Error, Tags, Warning, register

E009 = "agents_app.E009"
W003 = "agents_app.W003"
E010 = "agents_app.E010"
W004 = "agents_app.W004"
# A turn waiting longer than this for MCP connections is almost surely a value in milliseconds.
LONG_WAIT_SECONDS = 300


def wait_problems(label: str, wait: Any) -> list[Error | Warning]:
    """What is wrong with a class's ``wait_for_mcp_connections`` (E010, W004)."""
    if isinstance(wait, bool):
        return []
    timeout = wait.get("timeout") if isinstance(wait, dict) else None
    if not isinstance(wait, dict) or set(wait) != {"timeout"} or isinstance(timeout, bool) \
            or not isinstance(timeout, int | float) or timeout < 0:
        return [Error(f"{label}: wait_for_mcp_connections is {wait!r}; every turn would wait for its MCP "
                      "connections without a limit",
                      hint='Use True, False or {"timeout": seconds} with seconds >= 0.', id=E010)]
    if timeout > LONG_WAIT_SECONDS:
        return [Warning(f"{label}: wait_for_mcp_connections waits up to {timeout} s for MCP connections",
                        hint="The timeout is in seconds, not milliseconds as in the reference SDK.", id=W004)]
    return []


@register(Tags.compatibility)
def check_mcp_servers(app_configs: Any, **kwargs: Any) -> list[Error | Warning]:
    from ..checks import registered_classes
    from ..errors import AgentConfigurationError
    from ..tools import ClientTool
    from .servers import MCPServer, unique_names

    problems: list[Error | Warning] = []
    for slug, agent_class in sorted(registered_classes().items()):
        label = f"{agent_class.__qualname__} ({slug})"
        agent = agent_class(SimpleNamespace(name="(system check)", pk=None))
        problems.extend(wait_problems(label, agent_class.wait_for_mcp_connections))
        try:
            servers = list(agent.get_mcp_servers())
            if not all(isinstance(s, MCPServer) for s in servers):
                raise AgentConfigurationError("get_mcp_servers() must return MCPServer(...) declarations")
            unique_names(servers)
        except AgentConfigurationError as exc:
            problems.append(Error(f"{label}: {exc}", hint="Fix its get_mcp_servers().", id=E009))
            continue
        try:
            own = {getattr(t, "tool_name", None) or getattr(t, "name", None) or getattr(t, "__name__", "")
                   for t in agent.get_tools() if not isinstance(t, ClientTool)} | set(agent.compiled_actions())
        except AgentConfigurationError:
            continue  # E003 reports a broken get_actions()
        for server in servers:
            named = set() if isinstance(server.needs_approval, bool) else server.needs_approval
            for clash in sorted(server.tool_name(n) for n in named if server.tool_name(n) in own):
                problems.append(Warning(
                    f"{label}: MCP server {server.name!r} has a tool {clash!r}, as do its get_tools()/get_actions(); "
                    "the MCP tool replaces it in every turn",
                    hint="Give the server a tool_prefix, or rename the tool.", id=W003))
    return problems
