"""What action code and authorization policies are given (spec cloudflare-agents.md §5.3, §5.11).

``ActionContext`` is the second argument of ``execute`` and of every policy callback. Policies
(``permissions``, ``approval``, a function ``idempotency_key``) get a copy whose ``attach_reply``
does nothing: deciding whether to run an action must not leave traces in the reply.
"""

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import LazySettings, settings

from ..abort import AbortSignal
from .attachments import NO_ATTACHMENTS, AttachmentAttempt, NullReplyAttachments
from .descriptor import ActionKind

if TYPE_CHECKING:
    from ..agent import ChatAgent

__all__ = ["ActionAuthorizationContext", "ActionContext", "AuthorizationDecision", "TurnContext"]

logger = logging.getLogger("agents_app.actions")


@dataclass(frozen=True, kw_only=True)
class ActionContext:
    """The world of one action call.

    ``request_id`` is the turn's ("" outside a turn, e.g. a durable-pause approval days later);
    ``messages`` are the pydantic-ai model messages the call can see (empty for an approved
    durable-pause run). ``signal`` fires when the turn is cancelled or the action times out:
    long-running code should check it. ``agent.user`` is who asked for the turn.
    """

    agent: "ChatAgent"
    action: str
    request_id: str
    tool_call_id: str
    messages: Sequence[Any] = ()
    signal: AbortSignal = field(default_factory=AbortSignal)
    settings: LazySettings = settings
    logger: logging.Logger = logger
    attachments: AttachmentAttempt | NullReplyAttachments = NO_ATTACHMENTS

    def attach_reply(self, attachment: dict[str, Any]) -> bool:
        """Attach ``{"type": ..., ...}`` to this turn's reply (spec §5.12); False when it was ignored.

        Ignored: a value without a string ``type``, beyond 32 a turn, one that cannot be made
        JSON-safe, or any call from a policy callback. Discarded if this ``execute`` then fails.
        """
        return self.attachments.record(attachment)

    def for_policy(self) -> "ActionContext":
        """The copy policy callbacks get: same call, ``attach_reply`` does nothing."""
        return dataclasses.replace(self, attachments=NO_ATTACHMENTS)


@dataclass(frozen=True, kw_only=True)
class AuthorizationDecision:
    """The normalised answer of ``authorize_turn`` / ``authorize_action``.

    ``granted_permissions`` None means "every permission" (the default full grant).
    """

    allowed: bool
    reason: str | None = None
    granted_permissions: tuple[str, ...] | None = None

    @classmethod
    def of(cls, value: Any) -> "AuthorizationDecision":
        """Accept what a hook may return: a bool, a mapping, or a decision.

        Mappings take the reference's keys (``allowed``, ``reason``, ``grantedPermissions``)
        or the Python ones (``granted_permissions``).
        """
        if isinstance(value, AuthorizationDecision):
            return value
        if isinstance(value, bool):
            return cls(allowed=value)
        if isinstance(value, dict):
            granted = value.get("granted_permissions", value.get("grantedPermissions"))
            return cls(
                allowed=bool(value.get("allowed")),
                reason=value.get("reason"),
                granted_permissions=None if granted is None else tuple(granted),
            )
        raise TypeError(f"authorization hooks return a bool, a dict or an AuthorizationDecision, not {value!r}")


ALLOW_ALL = AuthorizationDecision(allowed=True)


@dataclass(frozen=True, kw_only=True)
class TurnContext:
    """What ``authorize_turn`` sees, once per model run (every turn and continuation)."""

    agent: "ChatAgent"
    system: str
    messages: Sequence[dict[str, Any]]
    tools: Sequence[str]
    model: str
    continuation: bool
    # The custom body of the chat request (``useAgentChat({body})``), or None.
    body: dict[str, Any] | None
    # Who asked for the turn (None for programmatic and scheduled turns).
    user: Any


@dataclass(frozen=True, kw_only=True)
class ActionAuthorizationContext:
    """What ``authorize_action`` sees, for every action call (spec §5.11)."""

    agent: "ChatAgent"
    action: str
    kind: ActionKind
    request_id: str
    tool_call_id: str
    input: Any
    required_permissions: tuple[str, ...]
    # From ``authorize_turn``; None means the turn grants every permission.
    granted_permissions: tuple[str, ...] | None
    # The turn-level decision, which the default ``authorize_action`` applies first.
    turn: AuthorizationDecision
    messages: Sequence[Any] = ()
