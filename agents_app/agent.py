"""``ChatAgent``: the class a developer subclasses to build an agent: its hooks and configuration.

One ``ChatAgent`` object serves one turn (like a Django class-based view serves one request):
the engine builds it with the turn's ``TurnState`` and calls ``on_chat_message()``; the turn's
request is readable as ``self.messages``, ``self.request_id``, ``self.body`` ... (views of
``self.turn``, never state the engine reads back). Outside a turn, ``await MyAgent.aget(name)``
returns a handle on the instance (``agents_app.handles.AgentHandle``: ``save_messages``,
``pending_approvals``, ``approve_execution`` ...).
"""

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from channels.db import database_sync_to_async
from pydantic_ai import Agent, CancellationToken, DeferredToolRequests, DeferredToolResults, RunContext
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallEvent
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.usage import UsageLimits

from . import conf, events, llm, transcript
from .abort import AbortSignal
from .actions import Action, call_maybe_async, compile_actions
from .actions.context import (
    ALLOW_ALL,
    ActionAuthorizationContext,
    AuthorizationDecision,
    CallAnnouncements,
    TurnContext,
    TurnState,
)
from .actions.envelopes import missing_permission_message
from .actions.ledger import USE_SETTING, UseSetting
from .actions.pipeline import action_tool, needs_approval
from .concurrency import MessageConcurrency
from .hooks import ToolCall, ToolCallDecision
from .llm import direct, ui_messages
from .llm import recovery as llm_recovery
from .llm.chunks import ChunkStream
from .mcp import connections as mcp_connections
from .mcp.servers import MCPServer
from .messages import UIMessage
from .protocol.naming import DEFAULT_INSTANCE_NAME, camel_case_to_kebab_case
from .recovery.policy import ChatRecovery, ChatRecoveryContext
from .schedules.language import ScheduledTask
from .steps import BeforeStep, StepConfig, StepContext
from .tools import ApprovalGate, ToolPolicy, Toolset, client_tools_from_schemas, compile_tools
from .usage import service as quotas

if TYPE_CHECKING:
    from .lifecycle.sockets import Connection, ConnectionRequest
    from .models import AgentInstance

logger = logging.getLogger("agents_app.agent")

# What on_chat_message may return: UI message chunks (dicts), plain-text pieces (str), a whole
# plain-text reply, or None for "no response".
ChatResponse = AsyncIterable[dict[str, Any] | str] | Iterable[dict[str, Any] | str] | str | None

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


@dataclass(kw_only=True)
class _RunPlan:
    """A turn's model, tools and instructions, before (and whether or not) a pydantic-ai agent is made of them."""

    model: Model
    toolset: Toolset
    instructions: str
    # Actions' input models by tool name: hooks see and return their JSON (``ToolPolicy.models``).
    action_models: dict[str, Any]
    # The tools of the turn's ready MCP servers, one toolset per server.
    mcp: list[AbstractToolset[Any]] = field(default_factory=list)

    def first_request(self) -> ModelRequestParameters | None:
        """The parameters of the first request, when ``llm.direct`` can make it (``direct.parameters``).

        Not with MCP tools: their definitions come from the servers, inside an agent run.
        """
        if self.mcp:
            return None
        external = self.toolset.external
        defs = [replace(d, kind="external") for d in external.tool_defs] if external else []
        return direct.parameters(self.toolset.server, defs, self.instructions)


# Builds the handle of an instance (``aget``, ``ChatAgent.handle``). Handles drive turns and
# approvals, which are built on this class, so they live a layer above (``agents_app.handles``),
# which registers its factory here when the app is ready (``AgentsAppConfig.ready``). Its type,
# ``agents_app.handles.AgentHandle``, is not named here either (not even for type checking), so
# that imports run one way; the methods returning one say so in their docstrings.
HandleFactory = Callable[..., Any]
_handle_factory: HandleFactory | None = None


def register_handle_factory(factory: HandleFactory) -> None:
    """Set what ``aget`` and ``ChatAgent.handle`` build (called once, when the app is ready)."""
    global _handle_factory
    _handle_factory = factory


def _handle(agent_class: type["ChatAgent"], instance: "AgentInstance", user: Any = None) -> Any:
    if _handle_factory is None:
        raise RuntimeError("agents_app is not ready: add it to INSTALLED_APPS and call django.setup() first")
    return _handle_factory(agent_class, instance, user)


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

    * ``shared``: one global namespace of instances that every logged-in user opens (default:
      each user has their own instance names, which only they and staff open).
    * ``model``: a model string overriding ``AGENT_MODEL`` for this class.
    * ``system_prompt``: the instructions given to the model.
    * ``message_concurrency``: what a submit does while another turn is queued or running:
      ``"queue"`` (default), ``"latest"``, ``"merge"``, ``"drop"`` or ``Debounce(ms=750)``
      (``agents_app.concurrency``).
    * ``max_persisted_messages``: keep at most this many messages stored, deleting the oldest
      after each write (default None: all). Storage only: a turn's model sees what it loaded.
    * ``max_steps``: model requests per turn (tool loops); the turn then ends cleanly, with its
      reply saved. None: ``AGENT_MAX_STEPS``.
    * ``chat_recovery``: how a turn cut by a crash or a stalled stream is recovered: a
      ``ChatRecovery`` (or a dict of its fields); ``True``/``False`` mean the defaults, as
      recovery is always on (``agents_app.recovery.policy``).
    * ``recovery_strategy``: how a recovery continues a cut reply: ``"prefill"``, ``"synthetic"``
      or ``"retrieve"`` (``agents_app.llm.recovery``); None (default): the model's provider decides.
    * ``chat_stream_stall_timeout``: seconds without a chunk from the model after which the
      stream is cut and recovered (0, the default: never).
    * ``starter_prompts``: ``(label, prompt)`` pairs the chat page offers while a conversation is
      empty; a click puts the prompt in the message box (the demo agent lists its demos).
    * ``action_ledger_pending_retry_lease``: how old a pending ledger row of this agent's actions
      must be before a retry may run it again (a timedelta; None: never). Default: the setting
      ``AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE`` (docs/architecture.md#ledger).
    * ``wait_for_mcp_connections``: before ``on_chat_message``, wait for the MCP connections this
      process is opening: ``True`` (until each is ready or failed), ``False`` (not at all: servers
      not ready yet are left out of this turn) or ``{"timeout": seconds}`` (default 10 s).
    """

    shared: ClassVar[bool] = False
    model: ClassVar[str | None] = None
    system_prompt: ClassVar[str] = "You are a helpful assistant."
    message_concurrency: ClassVar[MessageConcurrency] = "queue"
    max_persisted_messages: ClassVar[int | None] = None
    max_steps: ClassVar[int | None] = None
    chat_recovery: ClassVar[ChatRecovery | dict[str, Any] | bool] = True
    recovery_strategy: ClassVar[str | None] = None
    chat_stream_stall_timeout: ClassVar[float] = 0
    starter_prompts: ClassVar[tuple[tuple[str, str], ...]] = ()
    action_ledger_pending_retry_lease: ClassVar[timedelta | UseSetting | None] = USE_SETTING
    wait_for_mcp_connections: ClassVar[bool | dict[str, float]] = {"timeout": 10.0}

    def __init__(self, instance: "AgentInstance") -> None:
        self.instance = instance
        self.name: str = instance.name
        self._turn: TurnState[Any] | None = None
        self._mcp: mcp_connections.TurnServers | None = None
        # The turn's quota refusal once asked (a 1-tuple): before its MCP wait and its model request.
        self._quota: tuple[quotas.Refusal | None] | None = None

    @classmethod
    def for_turn(cls, instance: "AgentInstance", **state: Any) -> "ChatAgent":
        """The agent object that serves one turn, with that turn's ``TurnState(**state)`` (the engine's)."""
        agent = cls(instance)
        agent._turn = TurnState(agent=agent, **state)
        return agent

    # --- identity -----------------------------------------------------------------------------
    @classmethod
    def slug(cls) -> str:
        """URL slug: the class name in Cloudflare's kebab case (``SupportAgent`` → ``support-agent``)."""
        return camel_case_to_kebab_case(cls.__name__)

    @classmethod
    async def aget(cls, name: str = DEFAULT_INSTANCE_NAME, *, owner: Any = None) -> Any:
        """A handle on instance ``name`` in ``owner``'s namespace (created on first use, owned by them).

        ``owner=None`` is the global namespace: conversations that belong to no user (scheduled
        prompts, agents talking to agents), which only staff open in the chat (``?owner=``). A
        shared class has only the global namespace, so its instances never have an owner.
        """
        from .models import AgentInstance  # agent modules import this one before apps are ready

        if cls.shared and owner is not None:
            raise ValueError(f"{cls.__name__} is shared: its instances have no owner; call aget(name)")
        instance, _ = await database_sync_to_async(AgentInstance.objects.get_or_create)(
            slug=cls.slug(), name=name, owner=owner, parent=None
        )
        return _handle(cls, instance)

    @property
    def handle(self) -> Any:
        """The handle on this agent's instance (``agents_app.handles.AgentHandle``); in a turn, the
        turns it starts run for the same user (``authorize_turn`` sees them)."""
        return _handle(type(self), self.instance, self.user)

    async def sub_agent(self, agent_class: type["ChatAgent"], name: str) -> Any:
        """A handle on sub-agent ``name`` of class ``agent_class``: an instance of its own, owned
        by this one (made on first use; ``AgentHandle.sub_agent``). Its turns run for this turn's
        user; its class must be in ``AGENT_CLASSES``, as every agent's."""
        return await self.handle.sub_agent(agent_class, name)

    # --- the running turn ---------------------------------------------------------------------
    @property
    def turn(self) -> TurnState[Any]:
        """The turn this object serves; RuntimeError outside one."""
        if self._turn is None:
            raise RuntimeError(f"{type(self).__name__} is not running a turn")
        return self._turn

    # Read-only views of the turn for hooks (``on_chat_message``...); empty outside a turn.
    @property
    def messages(self) -> list[UIMessage]:
        """The turn's messages; outside a turn, the transcript ``load_messages()`` read (else empty)."""
        if self._transcript is not None:
            return self._transcript
        return self._turn.messages if self._turn is not None else []

    @property
    def request_id(self) -> str:
        return self._turn.request_id if self._turn is not None else ""

    @property
    def body(self) -> dict[str, Any] | None:
        return self._turn.body if self._turn is not None else None

    @property
    def client_tools(self) -> list[dict[str, Any]] | None:
        return self._turn.client_tools if self._turn is not None else None

    @property
    def continuation(self) -> bool:
        return self._turn.continuation if self._turn is not None else False

    @property
    def abort_signal(self) -> AbortSignal:
        return self._turn.abort_signal if self._turn is not None else AbortSignal()

    @property
    def user(self) -> Any:
        """Who asked for the turn (None for programmatic turns and approvals made later)."""
        return self._turn.user if self._turn is not None else None

    async def write(self, chunk: dict[str, Any]) -> None:
        """Send a chunk of your own into this turn's reply (``TurnState.write``)."""
        await self.turn.write(chunk)

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

    def get_mcp_servers(self) -> list[MCPServer]:
        """The MCP servers every instance of this agent uses: ``[MCPServer(name=..., url=...), ...]``.

        Their tools join the turn's tools (docs/architecture.md#mcp-servers); headers and stdio
        environment values are references (``env("TOKEN", prefix="Bearer ")``, ``setting("NAME")``).
        Servers added at runtime (``handle.add_mcp_server``) come after these.
        """
        return []

    async def connect_mcp_servers(self, runtime: list[MCPServer] | None = None) -> mcp_connections.TurnServers:
        """This turn's MCP servers, declared and runtime, with this process's connections to them
        started (made once per turn; the engine calls it before ``on_chat_message``). ``runtime``:
        the instance's runtime servers when the caller has read them (the turn's start has)."""
        if self._mcp is None:
            self._mcp = await mcp_connections.open_servers(self.instance.pk, self.get_mcp_servers(), runtime)
        return self._mcp

    async def wait_for_connections(self, timeout: float | None = None) -> list[str]:  # noqa: ASYNC109 - the reference's API
        """Wait until this turn's MCP connections are ready or failed, at most ``timeout`` seconds
        (None: no limit). Returns the servers still connecting. For ``on_chat_message`` code that
        needs every server's tools whatever ``wait_for_mcp_connections`` says."""
        return await (await self.connect_mcp_servers()).wait(timeout)

    async def quota_refusal(self) -> "quotas.Refusal | None":
        """The usage quota this turn's user or agent is over, or None; asked once per turn."""
        if self._quota is None:
            turn = self.turn
            self._quota = (await database_sync_to_async(quotas.refusal)(turn.user, self.slug())
                           if quotas.may_refuse(turn.user, self.slug()) else None,)
        return self._quota[0]

    async def start_mcp(self, runtime: list[MCPServer] | None = None) -> None:
        """Open the turn's MCP connections and wait for them as ``wait_for_mcp_connections`` says
        (``runtime``: as ``connect_mcp_servers``).

        The wait ends early when the turn is cancelled; a server still connecting then is left out
        of this turn (``chat:mcp:wait`` names it) and goes on connecting for the next. A turn over
        a usage quota neither waits nor connects: its error frame comes first.
        """
        if await self.quota_refusal() is not None:
            return  # the reply is refused at once (stream_model_reply): no wait, no sessions opened
        servers = await self.connect_mcp_servers(runtime)
        wait = self.wait_for_mcp_connections
        if not servers.connections or wait is False:
            return
        timeout = float(wait["timeout"]) if isinstance(wait, dict) else None
        waiting = asyncio.ensure_future(servers.wait(timeout))
        aborted = asyncio.ensure_future(self.abort_signal.wait())
        try:
            await asyncio.wait([waiting, aborted], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            aborted.cancel()
        pending = [c.server.name for c in servers.connections if not c.settled.is_set()]
        events.emit_chat(self.instance, events.MCP_WAIT, requestId=self.request_id, timeout=timeout, pending=pending)

    def compiled_actions(self) -> dict[str, Action[Any]]:
        """``get_actions()`` validated, by tool name; raises ``AgentConfigurationError`` if malformed."""
        return compile_actions(self.get_actions())

    async def authorize_turn(self, turn: TurnContext) -> bool | dict[str, Any] | AuthorizationDecision:
        """Decide once per model run what this turn's actions may do (docs/architecture.md#authorization).

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

    def get_max_steps(self) -> int:
        return self.max_steps if self.max_steps is not None else int(conf.get("AGENT_MAX_STEPS"))

    async def before_step(self, ctx: StepContext) -> StepConfig | None:
        """Change one model request of the turn (Think's ``beforeStep``; docs/architecture.md#pruning).

        Called before every request of the model run, with ``ctx.step_number`` (0 first) and the
        ``ctx.messages`` about to be sent; return ``StepConfig(messages=…, model=…, active_tools=…)``
        to send other messages (``agents_app.pruning.prune_messages``), use another model, or offer
        fewer tools, for that request only. None (the default) changes nothing.
        """
        return None

    def _steps_prepared(self) -> bool:
        """Whether ``before_step`` is overridden: then every request goes through the agent run that calls it."""
        return type(self).before_step is not ChatAgent.before_step

    def sanitize_message_for_persistence(self, message: UIMessage) -> UIMessage:
        """Change a message before it is stored (after the built-in sanitizer, before the row-size guard).

        E.g. redact a secret, or drop a large tool output the model no longer needs. The default
        stores it unchanged (``agents_app.sanitize``).
        """
        return message

    async def on_chat_message(self) -> ChatResponse:
        """Produce the reply of this turn. The default streams the model over the transcript."""
        return self.stream_model_reply()

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """Called after each turn's reply is persisted (errors are logged, never raised)."""

    def get_scheduled_tasks(self) -> dict[str, ScheduledTask]:
        """Tasks this instance runs on a schedule: ``{task_id: {"schedule", "prompt" | "handler", ...}}``.

        ``schedule`` is the schedule language (``"every day at 09:00"``, ``"every weekday at 08:30
        in Europe/Oslo"``, ``"every 15 minutes"``) or a cron expression; ``prompt`` a text (or a
        function returning one, called at each run) posted as a user message, running a turn;
        ``handler`` a function called with the run's ``ScheduledTaskContext`` instead; optional
        ``timezone`` and ``metadata``. Rows follow the declaration (``agents_app.schedules.declared``):
        when an instance is created, on ``manage.py sync_schedules``, and every ten minutes.
        """
        return {}

    def get_default_timezone(self) -> str | None:
        """The zone of wall-clock schedules that name none (an IANA name), or None to require one."""
        return None

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> dict[str, bool] | None:
        """Decide what a recovery attempt of an interrupted turn does (docs/architecture.md#attempt).

        Return ``{"persist": False}`` to drop the partial reply (settled tool results are kept
        anyway) and ``{"continue": False}`` to stop there instead of re-running or continuing
        the turn. The default, ``{}``, keeps the partial and carries on. ``ctx.recovery_data``
        is what the cut turn passed to ``stash()``. A raise ends the recovery as failed.
        """
        return {}

    async def stash(self, data: Any) -> None:
        """Keep ``data`` (JSON) with the running turn: ``on_chat_recovery`` gets it if the turn is cut."""
        await self.turn.stash(data)

    # --- connections and the transcript outside a turn (docs/architecture.md#connection-hooks) ---------
    # The transcript ``load_messages()`` read: what ``messages`` shows hooks that run outside a turn.
    _transcript: list[UIMessage] | None = None

    async def load_messages(self) -> list[UIMessage]:
        """Read the stored transcript into ``self.messages``, as the reference's ``this.messages``
        is outside a turn; the engine calls it before ``on_chat_response``, a scheduled handler, a
        callable method, ``on_connect`` and ``on_close`` (empty for a conversation not stored yet)."""
        if self.instance.pk is None:
            self._transcript = []
        else:
            self._transcript = await database_sync_to_async(transcript.load)(self.instance)
        return self._transcript

    async def on_connect(self, connection: "Connection", request: "ConnectionRequest") -> None:
        """A WebSocket connected to this instance (``agents_app.lifecycle.connections``).

        ``await connection.send(frame)`` sends it a frame of yours; ``await connection.close(code,
        reason)`` refuses it (use 4000-4999 so the npm client does not reconnect). Runs after the
        address check and before the conversation's frames; a raise is logged and the socket stays.
        """

    async def on_close(self, connection: "Connection", code: int, reason: str) -> None:
        """A WebSocket of this instance closed, with the close ``code`` and ``reason`` (errors are logged)."""

    # --- the default model turn -----------------------------------------------------------------
    def build_pydantic_agent(self) -> Agent[TurnState[Any], Any]:
        """The pydantic-ai agent of this turn: model, instructions, tools, actions and client tools.

        Tools get the turn's ``TurnState`` as ``ctx.deps`` (``ctx.deps.agent`` is this object).
        """
        return self._agent(self._plan())

    def _plan(self) -> "_RunPlan":
        """What this turn's model run is made of: the agent is built from it only if the run needs one."""
        turn = self.turn
        actions = self.compiled_actions()
        toolset = compile_tools(
            self.get_tools(), client_tools_from_schemas(turn.client_tools),
            actions={name: action_tool(a) for name, a in actions.items()},
            action_gates={name: _approval_gate(a) for name, a in actions.items() if a.approval_configured},
        )
        mcp = self._mcp_tools(toolset)
        turn.tool_names = sorted([*(t.name for t in toolset.server), *toolset.client_names,
                                  *(name for _, names in mcp for name in names)])
        return _RunPlan(model=self.get_model(), toolset=toolset, instructions=self.get_system_prompt(),
                        action_models={name: a.input_schema for name, a in actions.items()},
                        mcp=[connection.turn_toolset(names) for connection, names in mcp])

    def _mcp_tools(self, toolset: Toolset) -> list[tuple[mcp_connections.Connection, set[str]]]:
        """The tools of the ready MCP servers, merged into ``toolset`` (docs/architecture.md#mcp-tool-names).

        A declared server's tool replaces a ``get_tools()`` or action tool of its name (the
        reference's order); a runtime server's never replaces anything. A client tool beats both,
        and of two servers offering one name the first listed keeps it. Clashes are logged.
        """
        if self._mcp is None:
            return []
        declared = {s.name for s in self.get_mcp_servers()}
        server_names = {t.name for t in toolset.server}
        taken: set[str] = set(toolset.client_names)
        merged = []
        for connection in self._mcp.ready():
            keep = set()
            for name in connection.tools():
                if name in taken or (name in server_names and connection.server.name not in declared):
                    logger.warning("MCP tool %s of server %s is left out of %s's turn: another tool has its name",
                                   name, connection.server.name, self.instance)
                    continue
                if name in server_names:
                    logger.warning("MCP tool %s of server %s replaces the agent's own tool of that name",
                                   name, connection.server.name)
                    toolset.server = [t for t in toolset.server if t.name != name]
                    toolset.approval_gates.pop(name, None)
                taken.add(name)
                keep.add(name)
                if connection.server.approval_for(name[len(connection.server.tool_prefix):]):
                    toolset.approval_gates[name] = _always_ask
            merged.append((connection, keep))
        return merged

    def _agent(self, plan: "_RunPlan") -> Agent[TurnState[Any], Any]:
        toolset = plan.toolset
        return Agent(
            plan.model,
            deps_type=TurnState,
            instructions=plan.instructions,
            tools=toolset.server,
            toolsets=[*([toolset.external] if toolset.external else []), *plan.mcp],
            output_type=[str, DeferredToolRequests],
            capabilities=[ToolPolicy(
                agent=self, approval_gates=toolset.approval_gates, emit=self.turn.write, models=plan.action_models,
            ), *([BeforeStep(agent=self)] if self._steps_prepared() else [])],
        )

    async def _authorize_turn(self, model: Model | str | None) -> None:
        """Ask ``authorize_turn`` once for this model run."""
        turn = self.turn
        turn.authorization = ALLOW_ALL
        decision = await call_maybe_async(self.authorize_turn, TurnContext(
            agent=self, system=self.get_system_prompt(), messages=turn.messages,
            tools=turn.tool_names, model=str(getattr(model, "model_name", model)),
            continuation=turn.continuation, body=turn.body, user=turn.user,
        ))
        turn.authorization = AuthorizationDecision.of(decision)

    def _annotate(self, chunk: dict[str, Any]) -> dict[str, Any]:
        """Add an action's approval descriptor to its approval request or paused output."""
        if chunk["type"] == "tool-approval-request":
            descriptor = self.turn.approval_descriptors.get(chunk["toolCallId"])
        elif chunk["type"] == "tool-output-available" and not chunk.get("preliminary"):
            descriptor = self.turn.parked_descriptors.get(chunk["toolCallId"])
        else:
            return chunk
        return {**chunk, "approvalDescriptor": descriptor} if descriptor is not None else chunk

    async def stream_model_reply(self) -> AsyncIterator[dict[str, Any]]:
        """Run the model over the turn's transcript and yield AI SDK UI message chunks.

        A continuation resumes the last reply: its approved calls run now (the stored approvals
        become pydantic-ai's deferred results); a new prompt closes calls left unanswered.
        """
        turn = self.turn
        refused = await self.quota_refusal()
        if refused is not None:  # before any model request: the turn ends with this error frame
            turn.metered.limit = refused.limit
            yield {"type": "error", "errorText": refused.message}
            return
        if type(self).build_pydantic_agent is ChatAgent.build_pydantic_agent:
            plan = self._retrieving(self._plan())
            model: Model | str | None = plan.model
            first = plan.first_request()
            agent: Callable[[], Agent[TurnState[Any], Any]] = functools.partial(self._agent, plan)
        else:  # an agent of the subclass's making: only a run of it knows what it sends
            built = self.build_pydantic_agent()
            model, first, agent = built.model, None, lambda: built
        await self._authorize_turn(model)
        turn.metered.model = str(getattr(model, "model_name", model))
        history = await ui_messages.model_history(turn.messages, repair_last_response=not turn.continuation)
        deferred = _approved_calls(turn.messages) if turn.continuation else None
        strategy = llm_recovery.strategy_for(model, self.recovery_strategy) if isinstance(model, Model) else None
        if history and isinstance(history[-1], ModelResponse) and deferred is None:
            # Nothing to resume and no new user message (a recovery, ``continue_last_turn``): the
            # model is asked to go on, as its provider allows (``llm.recovery``).
            history = [*history, llm_recovery.go_on_request(strategy or llm_recovery.Strategy.PREFILL)]
        step = None
        # Only a new reply's first request: a continuation resumes one, in the agent run it left.
        if (first is not None and isinstance(model, Model) and not turn.continuation and not self._steps_prepared()
                and direct.FirstStep.can_start(history) and self.get_max_steps() >= 1
                and conf.get("AGENT_DIRECT_FIRST_STEP")):
            step = direct.FirstStep(model, history, first)
        # The turn's MCP sessions are in use until its reply ends: none closes as idle meanwhile (a
        # session counts as used when it became ready, so none closes between the plan and here).
        async with contextlib.AsyncExitStack() as borrowing:
            for connection in self._mcp.ready() if self._mcp is not None else []:
                await borrowing.enter_async_context(connection.borrowed())
            async for chunk in ChunkStream().chunks(self._model_events(agent, history, deferred, step)):
                if not _is_encoder_internal(chunk):
                    yield self._annotate(chunk)

    def _retrieving(self, plan: "_RunPlan") -> "_RunPlan":
        """The plan with its model recording the response id as the reply streams, and fetching the
        response when a recovery continues it, where the strategy is ``retrieve`` (``llm.recovery``)."""
        if llm_recovery.strategy_for(plan.model, self.recovery_strategy) is not llm_recovery.Strategy.RETRIEVE:
            return plan
        turn = self.turn
        return replace(plan, model=llm_recovery.RetrievingModel(
            plan.model, on_response_id=lambda rid: turn.write(llm_recovery.response_id_chunk(rid)),
            resume_id=llm_recovery.response_id_of(turn.messages) if turn.continuation else None))

    async def _model_events(self, agent: Callable[[], Agent[TurnState[Any], Any]], history: list[ModelMessage],
                            deferred: DeferredToolResults | None, step: direct.FirstStep | None) -> AsyncIterator[Any]:
        """The turn's model events: the direct first request if there is one (``llm.direct``), then,
        unless it answered with text alone, an agent run going on from where it ended.

        The pydantic-ai agent (``agent()`` builds it) is made only for that run: a reply of text
        alone never needs one. A reply of text alone ends without the run-result event an agent
        run adds at the end: its chunk (pydantic-ai's timestamp in ``message-metadata``) is one
        the wire does not carry (``_is_encoder_internal``), and the finish reason is the
        engine's (``rewrite_finish``).
        """
        turn = self.turn
        # The turn's usage: the agent run below adds each of its requests to it in place.
        usage = turn.metered.usage
        if step is not None:
            # The model's context opens (and closes) the provider's HTTP client, as the agent's does.
            async with step.model:
                async for event in step.events():
                    yield event
            usage.incr(step.usage)
            if not step.calls_tools:
                return
            history = step.history
        token = CancellationToken()
        turn.abort_signal.add_callback(token.cancel)
        limits = UsageLimits(request_limit=self.get_max_steps())
        run = agent()
        # A call runs once its announcement is handled: stored, so a crash while it runs leaves
        # it for recovery to answer, not to run again (``CallAnnouncements``).
        announcements = turn.announcements = CallAnnouncements()
        try:
            async with run, run.run_stream_events(
                message_history=history, cancellation_token=token, usage_limits=limits, deps=turn,
                deferred_tool_results=deferred, usage=usage,
            ) as events:
                async for event in _until_step_limit(events):
                    yield event
                    # Back for the next event: the reader has sent and stored what this one made.
                    if isinstance(event, ToolCallEvent):
                        announcements.handled(event.part.tool_call_id)
        finally:
            turn.announcements = None


async def _until_step_limit(events: AsyncIterator[Any]) -> AsyncIterator[Any]:
    """The run's events, ending (not failing) where the next model request would pass ``max_steps``.

    As the AI SDK's step limit does: the last step's tool results stay in the reply, and the
    stream closes with its finish chunks.
    """
    with contextlib.suppress(UsageLimitExceeded):
        async for event in events:
            yield event


async def _always_ask(ctx: RunContext[TurnState[Any]], args: dict[str, Any]) -> bool:
    """The approval gate of an MCP tool declared ``needs_approval``."""
    return True


def _approval_gate(action: Action[Any]) -> ApprovalGate:
    """The gate of an approval-gated action: asks ``needs_approval`` of the running turn (``ctx.deps``)."""

    async def gate(ctx: RunContext[TurnState[Any]], args: dict[str, Any]) -> bool:
        return await needs_approval(ctx.deps, action, args["input"], ctx.tool_call_id or "", ctx.messages)

    return gate
