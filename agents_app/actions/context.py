"""What agent code is handed while a turn runs (docs/architecture.md#action-context).

* ``TurnState``: one running turn, built by the engine; it is the pydantic-ai ``deps`` of the
  model run, so a tool reaches it as ``ctx.deps`` (and the agent as ``ctx.deps.agent``).
* ``ActionContext``: the second argument of ``execute`` and of every policy callback. Policies
  (``permissions``, ``approval``, a function ``idempotency_key``) get a copy whose
  ``attach_reply`` does nothing: deciding whether to run an action must not leave traces.
* ``TurnContext`` / ``ActionAuthorizationContext``: what ``authorize_turn`` / ``authorize_action``
  see (docs/architecture.md#authorization).
"""

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from django.conf import LazySettings, settings

from ..abort import AbortSignal
from ..messages import UIMessage
from ..usage.metered import Metered
from .attachments import NO_ATTACHMENTS, AttachmentAttempt, NullReplyAttachments, ReplyAttachments
from .descriptor import ActionKind

__all__ = [
    "ActionAgent", "ActionAuthorizationContext", "ActionContext", "AuthorizationDecision", "CallAnnouncements",
    "TurnContext", "TurnState",
]

logger = logging.getLogger("agents_app.actions")


class ActionAgent(Protocol):
    """What actions need of the agent they run for; ``ChatAgent`` is one.

    A protocol rather than ``ChatAgent`` itself: ``agents_app.agent`` builds on this package, and
    naming its class here made the two import each other. At run time ``agent`` is always the
    ``ChatAgent`` subclass of the conversation; ``TurnState[MyAgent]`` types it as such in tools.
    """

    instance: Any

    @property
    def user(self) -> Any: ...

    @property
    def messages(self) -> list[UIMessage]: ...

    async def authorize_action(self, ctx: "ActionAuthorizationContext") -> Any: ...


@dataclass(frozen=True, kw_only=True)
class ActionContext:
    """The world of one action call.

    ``request_id`` is the turn's ("" outside a turn, e.g. a durable-pause approval days later);
    ``messages`` are the pydantic-ai model messages the call can see (empty for an approved
    durable-pause run). ``signal`` fires when the turn is cancelled or the action times out:
    long-running code should check it. ``agent.user`` is who asked for the turn.

    ``idempotency_key`` is the call's ledger key (``action:<name>:<your key>``, or
    ``tool:<toolCallId>`` without one), set when ``execute`` runs. The ledger runs ``execute``
    once per key, except after a crash between the side effect and the ledger's record of it:
    then a retry with an explicit key runs it again once the lease has passed. Store the key
    with the side effect under a unique constraint (or pass it to the payment API as its
    idempotency key) and that second run finds the first one's work instead of repeating it.
    """

    agent: ActionAgent
    action: str
    request_id: str
    tool_call_id: str
    idempotency_key: str | None = None
    messages: Sequence[Any] = ()
    signal: AbortSignal = field(default_factory=AbortSignal)
    settings: LazySettings = settings
    logger: logging.Logger = logger
    attachments: AttachmentAttempt | NullReplyAttachments = NO_ATTACHMENTS

    def attach_reply(self, attachment: dict[str, Any]) -> bool:
        """Attach ``{"type": ..., ...}`` to this turn's reply; False when it was ignored.

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

AgentT = TypeVar("AgentT", bound=ActionAgent)


class CallAnnouncements:
    """The tool calls of a model run whose announcement the turn has handled: a call runs only then.

    pydantic-ai's streamed run (``run_stream_events``) stays one event ahead of its reader: it
    starts a tool as soon as the turn has *received* the call's event, while the turn is still
    turning it into ``tool-input-available`` and storing it (``TurnRun._chunk``). A process killed
    in that window has run the call without storing it, and its recovery runs it again. So a tool
    waits here (``ToolPolicy``) until the run's reader comes back for the next event, which it
    does only once the call's chunks are sent and stored (``ChatAgent._model_events``).

    Every call pydantic-ai runs is announced first (``FunctionToolCallEvent``), so a wait ends;
    one of a run that is cancelled ends with the run's task.
    """

    def __init__(self) -> None:
        self._handled: set[str] = set()
        self._waiting: dict[str, asyncio.Future[None]] = {}

    def handled(self, tool_call_id: str) -> None:
        """The turn has handled the call's announcement: it may run."""
        self._handled.add(tool_call_id)
        waiting = self._waiting.pop(tool_call_id, None)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    async def wait(self, tool_call_id: str) -> None:
        """Return once the call's announcement is handled (at once if it is)."""
        if tool_call_id in self._handled:
            return
        waiting = self._waiting.get(tool_call_id)
        if waiting is None:
            waiting = self._waiting[tool_call_id] = asyncio.get_running_loop().create_future()
        await asyncio.shield(waiting)


@dataclass(kw_only=True, eq=False)
class TurnState(Generic[AgentT]):
    """One running turn: what it was asked, and what it collects while it runs.

    The engine builds it before ``on_chat_message()`` and passes it as the pydantic-ai ``deps``
    (declare a tool's context as ``ctx: RunContext[TurnState[MyAgent]]``). Nothing of a turn is
    stored on the agent object, so an agent subclass may name its own attributes freely.
    """

    agent: AgentT
    request_id: str
    # The transcript when the turn started (a continuation's last message is the reply it extends).
    messages: list[UIMessage] = field(default_factory=list)
    # The chat request's custom body (``useAgentChat({body})``) and client tool schemas.
    body: dict[str, Any] | None = None
    client_tools: list[dict[str, Any]] | None = None
    continuation: bool = False
    # Who asked (None for programmatic turns and approvals made later).
    user: Any = None
    # Fires when the turn is cancelled (stop button, ``abort_request``, clear).
    abort_signal: AbortSignal = field(default_factory=AbortSignal)
    # Where ``ctx.attach_reply`` records (``actions.attachments``).
    attachments: ReplyAttachments | NullReplyAttachments = NO_ATTACHMENTS
    # ``authorize_turn``'s answer for the current model run; actions are authorized against it.
    authorization: AuthorizationDecision = ALLOW_ALL
    # Descriptors of this turn's calls awaiting approval / parked for staff, by tool call id:
    # they annotate the ``tool-approval-request`` / ``tool-output-available`` chunks.
    approval_descriptors: dict[str, dict[str, Any]] = field(default_factory=dict)
    parked_descriptors: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The tools the model is offered in the current model run (``TurnContext.tools``).
    tool_names: list[str] = field(default_factory=list)
    # Sends a chunk into the reply; stores the ``stash()`` data with the turn (set by the engine).
    emit: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    keep: Callable[[Any], Awaitable[None]] | None = None
    # What the turn's model runs used, and a quota that refused it (``agents_app.usage``).
    metered: Metered = field(default_factory=Metered)
    # While a model run streams: the calls whose announcement is stored, which may run (``CallAnnouncements``).
    announcements: CallAnnouncements | None = None

    async def write(self, chunk: dict[str, Any]) -> None:
        """Send a chunk of your own into this turn's reply, e.g. a data part::

            await ctx.deps.write({"type": "data-progress", "id": "p1", "data": {"percent": 40}})

        Same type and id update the part in place; ``"transient": True`` reaches the connected
        clients but is not stored.
        """
        if self.emit is None:
            raise RuntimeError("write() is only possible while the turn is running")
        await self.emit(chunk)

    async def stash(self, data: Any) -> None:
        """Keep ``data`` with the turn for its recovery (``ChatAgent.stash``); the last call wins."""
        if self.keep is None:
            raise RuntimeError("stash() is only possible while the turn is running")
        await self.keep(data)


@dataclass(frozen=True, kw_only=True)
class TurnContext:
    """What ``authorize_turn`` sees, once per model run (every turn and continuation)."""

    agent: ActionAgent
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
    """What ``authorize_action`` sees, for every action call (docs/architecture.md#authorization)."""

    agent: ActionAgent
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
