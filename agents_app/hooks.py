"""Tool-call hooks: ``before_tool_call`` / ``after_tool_call``, the outermost gate of every server tool.

``ChatAgent.before_tool_call(call)`` sees every server tool and action call before it runs and
decides, as the reference's ``beforeToolCall`` (docs/architecture.md#action-pipeline): ``None`` or
``ToolCallDecision.allow()`` runs it as asked, ``allow(input={...})`` with this input instead,
``block(reason)`` gives the model ``reason``, ``substitute(output)`` gives it ``output``.
``after_tool_call(call, output)`` then observes what the model gets. Approval comes *before* the
hook (the user approves what the model asked), so an approved action whose input the hook rewrites
is refused with ``ActionApprovalInputError`` rather than run with an input nobody approved.
"""

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, kw_only=True)
class ToolCall:
    """One call the model made, as the hooks see it."""

    tool_name: str
    tool_call_id: str
    # The arguments as JSON (an action's validated input, dumped).
    input: dict[str, Any] = field(default_factory=dict)
    # Whether the user approved this call (approval tools and approval-gated actions).
    approved: bool = False


@dataclass(frozen=True)
class ToolCallDecision:
    """What ``before_tool_call`` decided; build one with ``allow``, ``block`` or ``substitute``."""

    action: Literal["allow", "block", "substitute"]
    input: dict[str, Any] | None = None
    reason: str = ""
    output: Any = None

    @classmethod
    def allow(cls, input: dict[str, Any] | None = None) -> "ToolCallDecision":
        """Run the call, with ``input`` instead of the model's arguments when given."""
        return cls("allow", input=input)

    @classmethod
    def block(cls, reason: str) -> "ToolCallDecision":
        """Do not run the call; the model reads ``reason`` as its output."""
        return cls("block", reason=reason)

    @classmethod
    def substitute(cls, output: Any) -> "ToolCallDecision":
        """Do not run the call; the model reads ``output`` as if the tool had returned it."""
        return cls("substitute", output=output)
