"""Exceptions of the agents app, in three families.

* ``AgentConfigurationError``: misuse by the developer, raised at definition or startup.
* ``ProtocolError`` (from ``protocol.parse``): bad client input; becomes an error frame.
* ``AgentAccessError``: the caller may not open this agent instance; becomes a close code / HTTP error.
"""

from .protocol.parse import ProtocolError
from .protocol.types import CloseCode

__all__ = [
    "AgentAccessError",
    "AgentConfigurationError",
    "NotAuthenticated",
    "PermissionDenied",
    "ProtocolError",
    "UnknownAgent",
]


class AgentConfigurationError(Exception):
    """The project's agent configuration is wrong (a bad ``AGENT_CLASSES`` entry, a bad model)."""


class AgentAccessError(Exception):
    """Base of the errors that refuse a connection or request to an agent instance."""

    close_code: CloseCode = CloseCode.FORBIDDEN
    http_status: int = 403


class UnknownAgent(AgentAccessError):
    """No registered agent class has this slug."""

    close_code = CloseCode.NOT_FOUND
    http_status = 400


class NotAuthenticated(AgentAccessError):
    """Anonymous users may not open agent instances."""

    close_code = CloseCode.UNAUTHENTICATED
    http_status = 401


class PermissionDenied(AgentAccessError):
    """The instance belongs to another user and the agent class is not shared."""

    close_code = CloseCode.FORBIDDEN
    http_status = 403
