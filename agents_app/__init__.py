"""Durable AI chat agents for Django.

The public API: subclass ``ChatAgent``, list the class in ``AGENT_CLASSES``, and talk to it at
``/agents/<slug>/<name>`` with the ``cf_agent_*`` protocol, or from code through the
``AgentHandle`` that ``await MyAgent.aget(name)`` returns. A turn cut by a crash is recovered
(``ChatRecovery``, ``on_chat_recovery``). Declare side effects with
``action()``; steer tool calls with ``before_tool_call`` (``ToolCallDecision``); tools see the
running turn as ``ctx.deps`` (``TurnState``). Names are imported lazily so that a module defining
agents can import this package before Django's app registry is ready.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .abort import AbortSignal
    from .actions import Action, action
    from .actions.context import (
        ActionAuthorizationContext,
        ActionContext,
        AuthorizationDecision,
        TurnContext,
        TurnState,
    )
    from .agent import ChatAgent, ChatResponseResult, SaveMessagesResult
    from .agent_tools import agent_tool
    from .concurrency import Debounce
    from .errors import AgentConfigurationError
    from .followers import StreamCallback
    from .handles import AgentHandle
    from .hooks import ToolCall, ToolCallDecision
    from .lifecycle.sockets import Connection, ConnectionRequest
    from .mcp.servers import MCPServer
    from .recovery.policy import ChatRecovery, ChatRecoveryContext, ChatRecoveryExhaustedContext
    from .rpc import callable
    from .schedules.declared import ScheduleEntry
    from .schedules.language import ScheduledTaskContext, scheduled_occurrence

# Public name → the module that defines it.
_EXPORTS = {
    "AbortSignal": ".abort",
    "Action": ".actions",
    "ActionAuthorizationContext": ".actions.context",
    "ActionContext": ".actions.context",
    "AgentConfigurationError": ".errors",
    "AgentHandle": ".handles",
    "AuthorizationDecision": ".actions.context",
    "ChatAgent": ".agent",
    "ChatRecovery": ".recovery.policy",
    "ChatRecoveryContext": ".recovery.policy",
    "ChatRecoveryExhaustedContext": ".recovery.policy",
    "ChatResponseResult": ".agent",
    "Connection": ".lifecycle.sockets",
    "ConnectionRequest": ".lifecycle.sockets",
    "MCPServer": ".mcp.servers",
    "Debounce": ".concurrency",
    "SaveMessagesResult": ".agent",
    "ScheduleEntry": ".schedules.declared",
    "ScheduledTaskContext": ".schedules.language",
    "StreamCallback": ".followers",
    "ToolCall": ".hooks",
    "ToolCallDecision": ".hooks",
    "TurnContext": ".actions.context",
    "TurnState": ".actions.context",
    "action": ".actions",
    "agent_tool": ".agent_tools",
    "callable": ".rpc",
    "scheduled_occurrence": ".schedules.language",
}

__all__ = [
    "AbortSignal",
    "Action",
    "ActionAuthorizationContext",
    "ActionContext",
    "AgentConfigurationError",
    "AgentHandle",
    "AuthorizationDecision",
    "ChatAgent",
    "ChatRecovery",
    "ChatRecoveryContext",
    "ChatRecoveryExhaustedContext",
    "ChatResponseResult",
    "Connection",
    "ConnectionRequest",
    "Debounce",
    "MCPServer",
    "SaveMessagesResult",
    "ScheduleEntry",
    "ScheduledTaskContext",
    "StreamCallback",
    "ToolCall",
    "ToolCallDecision",
    "TurnContext",
    "TurnState",
    "action",
    "agent_tool",
    "callable",
    "scheduled_occurrence",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(name)
    return getattr(import_module(_EXPORTS[name], __name__), name)
