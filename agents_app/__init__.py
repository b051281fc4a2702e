"""Durable AI chat agents for Django.

The public API: subclass ``ChatAgent``, list the class in ``AGENT_CLASSES``, and talk to it at
``/agents/<slug>/<name>`` with the ``cf_agent_*`` protocol. Names are imported lazily so that a
module defining agents can import this package before Django's app registry is ready.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .actions import Action, action
    from .agent import AbortSignal, ChatAgent, ChatResponseResult, SaveMessagesResult
    from .errors import AgentConfigurationError

__all__ = [
    "AbortSignal",
    "Action",
    "AgentConfigurationError",
    "ChatAgent",
    "ChatResponseResult",
    "SaveMessagesResult",
    "action",
]


def __getattr__(name: str) -> Any:
    if name in ("AbortSignal", "ChatAgent", "ChatResponseResult", "SaveMessagesResult"):
        from . import agent

        return getattr(agent, name)
    if name in ("Action", "action"):
        from . import actions

        return getattr(actions, name)
    if name == "AgentConfigurationError":
        from .errors import AgentConfigurationError

        return AgentConfigurationError
    raise AttributeError(name)
