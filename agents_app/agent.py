"""``ChatAgent``: the class a developer subclasses to build an agent.

One ``ChatAgent`` object serves one turn (like a Django class-based view serves one request):
the engine builds it, fills in the turn's state (``messages``, ``request_id``, ``body``,
``abort_signal``) and calls ``on_chat_message()``. Outside a turn, ``await MyAgent.aget(name)``
gives a handle for programmatic turns (``save_messages``).
"""

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from channels.db import database_sync_to_async
from pydantic import TypeAdapter
from pydantic_ai import Agent, CancellationToken, DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.messages import repair_messages
from pydantic_ai.models import Model
from pydantic_ai.ui.vercel_ai import VercelAIAdapter, VercelAIEventStream
from pydantic_ai.ui.vercel_ai.request_types import UIMessage as PydanticUIMessage
from pydantic_ai.usage import UsageLimits

from . import conf, llm
from .abort import AbortSignal
from .actions import NO_ATTACHMENTS, Action, NullReplyAttachments, ReplyAttachments, call_maybe_async, compile_actions
from .actions.context import ALLOW_ALL, ActionAuthorizationContext, AuthorizationDecision, TurnContext
from .actions.envelopes import missing_permission_message
from .actions.pipeline import action_tool, needs_approval
from .hooks import ToolCall, ToolCallDecision
from .messages import UIMessage
from .registry import DEFAULT_INSTANCE_NAME, camel_case_to_kebab_case
from .tools import ApprovalGate, ToolPolicy, client_tools_from_schemas, compile_tools

# What on_chat_message may return: UI message chunks (dicts), plain-text pieces (str), a whole
# plain-text reply, or None for "no response".
ChatResponse = AsyncIterable[dict[str, Any] | str] | Iterable[dict[str, Any] | str] | str | None

_UI_MESSAGES = TypeAdapter(list[PydanticUIMessage])


@dataclass(kw_only=True)
class ChatResponseResult:
    """What ``on_chat_response`` receives after a turn's reply is persisted."""

    message: UIMessage | None
    request_id: str
    continuation: bool
    status: str
    error: str | None = None
    # What the turn's actions attached (``ctx.attach_reply``); a copy, yours to change.
    attachments: list[dict[str, Any]] = field(default_factory=list)


@dataclass(kw_only=True)
class SaveMessagesResult:
    """Result of a programmatic turn (``save_messages``)."""

    request_id: str
    status: str
    error: str | None = None


def _for_pydantic_ai(messages: list[UIMessage]) -> list[UIMessage]:
    """The transcript as pydantic-ai's UIMessage model accepts it.

    The stored ``tool-<name>`` parts carry fields the AI SDK type pydantic-ai validates against
    does not allow there: ``toolName`` (as Cloudflare persists it), and the action approval
    descriptors (``approvalDescriptor``, ``approval.descriptor``), which are for people, not the model.
    """
    return [{**m, "parts": [_tool_part_for_pydantic_ai(p) for p in m.get("parts", [])]} for m in messages]


def _tool_part_for_pydantic_ai(part: dict[str, Any]) -> dict[str, Any]:
    if not str(part.get("type", "")).startswith("tool-"):
        return part
    cleaned = {k: v for k, v in part.items() if k not in ("toolName", "approvalDescriptor")}
    if isinstance(part.get("approval"), dict) and "descriptor" in part["approval"]:
        cleaned["approval"] = {k: v for k, v in part["approval"].items() if k != "descriptor"}
    return cleaned


def _approved_calls(messages: list[UIMessage]) -> DeferredToolResults | None:
    """Approvals the user gave on the last reply, as pydantic-ai deferred results (it runs them)."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    approved = {
        p["toolCallId"]: True
        for p in (last or {}).get("parts", [])
        if p.get("state") == "approval-responded" and (p.get("approval") or {}).get("approved") is True
    }
    return DeferredToolResults(approvals=approved) if approved else None


def _is_encoder_internal(chunk: dict[str, Any]) -> bool:
    """Chunks of the SSE encoding that the WebSocket protocol does not carry.

    ``done`` is the SSE ``[DONE]`` line (the protocol has its own terminal frame), and
    pydantic-ai's per-run ``message-metadata`` holds only its internal timestamp.
    """
    if chunk["type"] == "done":
        return True
    return chunk["type"] == "message-metadata" and set(chunk.get("messageMetadata") or {}) <= {"pydantic_ai"}


class ChatAgent:
    """Base class of every agent. Override what you need; the defaults run ``AGENT_MODEL``.

    Class attributes (``None`` means "use the setting"):

    * ``shared``: any logged-in user may open any instance (default: owner and staff only).
    * ``model``: a model string overriding ``AGENT_MODEL`` for this class.
    * ``system_prompt``: the instructions given to the model.
    """

    shared: ClassVar[bool] = False
    model: ClassVar[str | None] = None
    system_prompt: ClassVar[str] = "You are a helpful assistant."

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        self.name: str = instance.name
        # Turn state, set by the engine before on_chat_message() runs.
        self.messages: list[UIMessage] = []
        self.request_id: str = ""
        self.body: dict[str, Any] | None = None
        self.client_tools: list[dict[str, Any]] | None = None
        self.continuation: bool = False
        self.abort_signal = AbortSignal()
        # Who asked for the turn (None for programmatic turns and approvals made later).
        self.user: Any = None
        # Set once per model run by ``authorize_turn``; actions are authorized against it.
        self.turn_authorization = ALLOW_ALL
        # Where ``ctx.attach_reply`` records, for this turn (``actions.attachments``).
        self.reply_recorder: ReplyAttachments | NullReplyAttachments = NO_ATTACHMENTS
        # Descriptors of this turn's calls awaiting approval / parked for staff, by tool call id:
        # they annotate the ``tool-approval-request`` / ``tool-output-available`` chunks.
        self.approval_descriptors: dict[str, dict[str, Any]] = {}
        self.parked_descriptors: dict[str, dict[str, Any]] = {}
        # Names of the tools the model is offered in this turn (``TurnContext.tools``).
        self._tool_names: list[str] = []
        # Set by the engine while a turn runs: sends a chunk into the reply.
        self._emit: Callable[[dict[str, Any]], Awaitable[None]] | None = None

    # --- identity -----------------------------------------------------------------------------
    @classmethod
    def slug(cls) -> str:
        """URL slug: the class name in Cloudflare's kebab case (``SupportAgent`` → ``support-agent``)."""
        return camel_case_to_kebab_case(cls.__name__)

    # --- what to override ---------------------------------------------------------------------
    def get_system_prompt(self) -> str:
        return self.system_prompt

    def get_tools(self) -> list[Any]:
        """The tools of this agent (see ``agents_app.tools``).

        Plain functions (sync or async, async generators for progress) and ``pydantic_ai.Tool``
        objects run here; ``tool(fn, needs_approval=...)`` waits for the user's approval;
        ``ClientTool(...)`` runs in the browser. Tools the client declares are added.
        """
        return []

    def get_actions(self) -> dict[str, Any]:
        """The actions of this agent: ``{"refund_order": action(...), ...}`` (see ``agents_app.actions``).

        Each becomes a tool named after its key (or its ``name``), merged after ``get_tools()``:
        an action wins a name clash with a plain tool, a client tool wins over both.
        """
        return {}

    def compiled_actions(self) -> dict[str, Action[Any]]:
        """``get_actions()`` validated, by tool name; raises ``AgentConfigurationError`` if malformed."""
        return compile_actions(self.get_actions())

    async def authorize_turn(self, turn: TurnContext) -> bool | dict[str, Any] | AuthorizationDecision:
        """Decide once per model run what this turn's actions may do (spec §5.11).

        Return True (the default: everything), False (no action may run), or a decision with
        ``granted_permissions`` (a list: actions requiring anything else are refused) and a
        ``reason``. ``turn.user`` and ``turn.body`` say who asks and with what request body.
        """
        return True

    async def authorize_action(self, ctx: ActionAuthorizationContext) -> bool | dict[str, Any] | AuthorizationDecision:
        """Decide whether one action call may run; by default, by the turn's granted permissions.

        Called at every execution, and before asking for an approval (a call that would be
        refused is not put to the user). Denied: the model gets ``ActionAuthorizationError``.
        """
        if not ctx.turn.allowed:
            return AuthorizationDecision(allowed=False, reason=ctx.turn.reason)
        if ctx.granted_permissions is None:
            return True
        missing = [p for p in ctx.required_permissions if p not in ctx.granted_permissions]
        return True if not missing else AuthorizationDecision(allowed=False, reason=missing_permission_message(missing))

    async def before_tool_call(self, call: ToolCall) -> ToolCallDecision | dict[str, Any] | None:
        """The outer gate of every server tool and action call (``agents_app.hooks``); None runs it."""
        return None

    async def after_tool_call(self, call: ToolCall, output: Any) -> None:
        """Observe what a server tool or action call gave the model."""

    def render_attachment(self, attachment: dict[str, Any]) -> dict[str, Any] | None:
        """How a reply attachment is shown to channels (the chat page), or None to hide it.

        The default shows it as recorded; the chat page draws ``email_draft``, ``card`` and
        ``voice_note`` attachments, and any other type as a generic card. ``on_chat_response``
        and ``reply_attachments()`` always get the attachments as recorded.
        """
        return attachment

    def get_model(self) -> Model:
        return llm.get_model(self.model)

    async def on_chat_message(self) -> ChatResponse:
        """Produce the reply of this turn. The default streams the model over the transcript."""
        return self.stream_model_reply()

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """Called after each turn's reply is persisted (errors are logged, never raised)."""

    # --- inside a turn ------------------------------------------------------------------------------
    async def write(self, chunk: dict[str, Any]) -> None:
        """Send a chunk of your own into this turn's reply, e.g. a data part::

            await self.write({"type": "data-progress", "id": "p1", "data": {"percent": 40}})

        Same type and id update the part in place; ``"transient": True`` reaches the connected
        clients but is not stored.
        """
        if self._emit is None:
            raise RuntimeError("write() is only possible while a turn of this agent is running")
        await self._emit(chunk)

    # --- the instance's turns (outside a turn too) ----------------------------------------------
    async def has_pending_interaction(self) -> bool:
        """True while a reply waits on the user: an approval, or a tool call without a result."""
        from . import turns

        return await turns.has_pending_interaction(self.instance)

    async def wait_until_stable(self, timeout: float = 10.0) -> bool:  # noqa: ASYNC109 - spec API: False at the deadline
        """Wait until no turn is queued or running and nothing waits on the user (False on timeout)."""
        from . import turns

        return await turns.wait_until_stable(self.instance, timeout)

    async def reset_turn_state(self) -> None:
        """Abort the running turn and skip the queued ones, keeping the transcript (clear does both)."""
        from . import turns

        await turns.reset_turn_state(self.instance)

    async def abort_request(self, request_id: str) -> bool:
        """Cancel one queued or running turn by request id."""
        from . import turns

        return await turns.cancel(self.instance, request_id)

    async def abort_all_requests(self) -> int:
        """Cancel every queued and running turn of the instance; returns how many."""
        from . import turns

        return await turns.cancel_all(self.instance)

    async def reply_attachments(self, request_id: str | None = None) -> list[dict[str, Any]]:
        """What the actions of a turn attached: turn ``request_id``, else the latest finished turn."""
        from .models import Turn

        turns = Turn.objects.filter(instance_id=self.instance.pk).exclude(
            status__in=[Turn.Status.QUEUED, Turn.Status.RUNNING]
        )
        if request_id is not None:
            turns = turns.filter(request_id=request_id)
        turn = await turns.order_by("-pk").only("attachments").afirst()
        return list(turn.attachments) if turn is not None else []

    async def pending_approvals(self, execution_id: str | None = None) -> list[dict[str, Any]]:
        """Parked durable-pause calls of this instance: ``[{executionId, source, descriptor}]``."""
        from . import approvals

        return await database_sync_to_async(approvals.pending_approvals)(self.instance, execution_id)

    async def approve_execution(self, execution_id: str, *, actor: Any = None) -> Any:
        """Run a parked call once and continue the conversation (``approvals.approve_execution``)."""
        from . import approvals

        return await approvals.approve_execution(execution_id, actor=actor, instance=self.instance)

    async def reject_execution(self, execution_id: str, reason: str | None = None, *, actor: Any = None) -> Any:
        """Refuse a parked call and continue the conversation (``approvals.reject_execution``)."""
        from . import approvals

        return await approvals.reject_execution(execution_id, reason, actor=actor, instance=self.instance)

    # --- the default model turn -----------------------------------------------------------------
    def build_pydantic_agent(self) -> Agent[Any, Any]:
        """The pydantic-ai agent of this turn: model, instructions, tools, actions and client tools.

        Tools get this ``ChatAgent`` as ``ctx.deps`` (declare ``ctx: RunContext[MyAgent]``).
        """
        actions = self.compiled_actions()
        toolset = compile_tools(
            self.get_tools(), client_tools_from_schemas(self.client_tools),
            actions={name: action_tool(a) for name, a in actions.items()},
            action_gates={name: self._approval_gate(a) for name, a in actions.items() if a.approval_configured},
        )
        self._tool_names = sorted([*(t.name for t in toolset.server), *toolset.client_names])
        return Agent(
            self.get_model(),
            instructions=self.get_system_prompt(),
            tools=toolset.server,
            toolsets=[toolset.external] if toolset.external else [],
            output_type=[str, DeferredToolRequests],
            capabilities=[ToolPolicy(
                agent=self, approval_gates=toolset.approval_gates, emit=self.write,
                models={name: a.input_schema for name, a in actions.items()},
            )],
        )

    def _approval_gate(self, action: Action[Any]) -> ApprovalGate:
        async def gate(ctx: RunContext[Any], args: dict[str, Any]) -> bool:
            return await needs_approval(self, action, args["input"], ctx.tool_call_id or "", ctx.messages)

        return gate

    async def _authorize_turn(self, agent: Agent[Any, Any]) -> None:
        """Ask ``authorize_turn`` once for this model run (spec §5.11)."""
        self.turn_authorization = ALLOW_ALL
        decision = await call_maybe_async(self.authorize_turn, TurnContext(
            agent=self, system=self.get_system_prompt(), messages=self.messages,
            tools=self._tool_names, model=str(getattr(agent.model, "model_name", agent.model)),
            continuation=self.continuation, body=self.body, user=self.user,
        ))
        self.turn_authorization = AuthorizationDecision.of(decision)

    def _annotate(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """Add an action's approval descriptor to its approval request or paused output (spec §2.10 d)."""
        if chunk["type"] == "tool-approval-request":
            descriptor = self.approval_descriptors.get(chunk["toolCallId"])
        elif chunk["type"] == "tool-output-available" and not chunk.get("preliminary"):
            descriptor = self.parked_descriptors.get(chunk["toolCallId"])
        else:
            return chunk
        return {**chunk, "approvalDescriptor": descriptor} if descriptor is not None else chunk

    async def stream_model_reply(self) -> AsyncIterator[dict[str, Any]]:
        """Run the model over ``self.messages`` and yield AI SDK UI message chunks.

        A continuation resumes the last reply: its approved calls run now (the stored approvals
        become pydantic-ai's deferred results); a new prompt closes calls left unanswered.
        """
        agent = self.build_pydantic_agent()
        await self._authorize_turn(agent)
        history = VercelAIAdapter.load_messages(_UI_MESSAGES.validate_python(_for_pydantic_ai(self.messages)))
        history = repair_messages(history, repair_last_response=not self.continuation)
        token = CancellationToken()
        self.abort_signal.add_callback(token.cancel)
        encoder: VercelAIEventStream[Any, Any] = VercelAIEventStream(None, sdk_version=6)
        limits = UsageLimits(request_limit=conf.get("AGENT_MAX_STEPS"))
        # Entering the agent opens (and leaving closes) the provider's HTTP client.
        async with agent, agent.run_stream_events(
            message_history=history, cancellation_token=token, usage_limits=limits, deps=self,
            deferred_tool_results=_approved_calls(self.messages) if self.continuation else None,
        ) as events:
            async for chunk in encoder.transform_stream(events):
                data = chunk.model_dump(mode="json", by_alias=True, exclude_none=True)
                if not _is_encoder_internal(data):
                    yield self._annotate(data)

    # --- handles outside a turn -----------------------------------------------------------------
    @classmethod
    async def aget(cls, name: str = DEFAULT_INSTANCE_NAME, *, owner: Any = None) -> "ChatAgent":
        """A handle on instance ``name`` of this class (created on first use, owned by ``owner``)."""
        from .models import AgentInstance

        instance, _ = await database_sync_to_async(AgentInstance.objects.get_or_create)(
            slug=cls.slug(), name=name, defaults={"owner": owner}
        )
        return cls(instance)

    async def save_messages(self, messages: list[UIMessage | str]) -> SaveMessagesResult:
        """Append messages to the transcript and run a turn on them; wait for it to finish.

        ``messages`` are UIMessages (plain strings become user text messages). The turn queues
        behind any running turn of the instance, and every connection of the instance, on any
        server process, sees its reply stream.
        """
        from . import turns

        return await turns.save_messages(self.instance, messages)
