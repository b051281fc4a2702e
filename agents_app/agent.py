"""``ChatAgent``: the class a developer subclasses to build an agent.

One ``ChatAgent`` object serves one turn (like a Django class-based view serves one request):
the engine builds it, fills in the turn's state (``messages``, ``request_id``, ``body``,
``abort_signal``) and calls ``on_chat_message()``. Outside a turn, ``await MyAgent.aget(name)``
gives a handle for programmatic turns (``save_messages``).
"""

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from channels.db import database_sync_to_async
from pydantic import TypeAdapter
from pydantic_ai import Agent, CancellationToken, DeferredToolRequests, DeferredToolResults
from pydantic_ai.messages import repair_messages
from pydantic_ai.models import Model
from pydantic_ai.ui.vercel_ai import VercelAIAdapter, VercelAIEventStream
from pydantic_ai.ui.vercel_ai.request_types import UIMessage as PydanticUIMessage
from pydantic_ai.usage import UsageLimits

from . import conf, llm
from .messages import UIMessage
from .registry import DEFAULT_INSTANCE_NAME, camel_case_to_kebab_case
from .tools import ToolPolicy, client_tools_from_schemas, compile_tools

# What on_chat_message may return: UI message chunks (dicts), plain-text pieces (str), a whole
# plain-text reply, or None for "no response".
ChatResponse = AsyncIterable[dict[str, Any] | str] | Iterable[dict[str, Any] | str] | str | None

_UI_MESSAGES = TypeAdapter(list[PydanticUIMessage])


class AbortSignal:
    """Fires when the turn is cancelled (stop button, ``cancel_chat``, clear, timeout)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None
        self._callbacks: list[Callable[[], Any]] = []

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def abort(self, reason: str = "Aborted") -> None:
        if self._event.is_set():
            return
        self.reason = reason
        self._event.set()
        for callback in self._callbacks:
            callback()

    def add_callback(self, callback: Callable[[], Any]) -> None:
        """Call ``callback`` on abort (at once if already aborted)."""
        if self.aborted:
            callback()
        else:
            self._callbacks.append(callback)

    async def wait(self) -> None:
        await self._event.wait()


@dataclass(kw_only=True)
class ChatResponseResult:
    """What ``on_chat_response`` receives after a turn's reply is persisted."""

    message: UIMessage | None
    request_id: str
    continuation: bool
    status: str
    error: str | None = None


@dataclass(kw_only=True)
class SaveMessagesResult:
    """Result of a programmatic turn (``save_messages``)."""

    request_id: str
    status: str
    error: str | None = None


def _for_pydantic_ai(messages: list[UIMessage]) -> list[UIMessage]:
    """The transcript as pydantic-ai's UIMessage model accepts it.

    The stored ``tool-<name>`` parts carry ``toolName`` (as Cloudflare persists them); the AI SDK
    type pydantic-ai validates against allows it only on ``dynamic-tool`` parts.
    """
    return [
        {**m, "parts": [
            {k: v for k, v in p.items() if k != "toolName"}
            if str(p.get("type", "")).startswith("tool-") else p
            for p in m.get("parts", [])
        ]}
        for m in messages
    ]


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

    # --- the default model turn -----------------------------------------------------------------
    def build_pydantic_agent(self) -> Agent[Any, Any]:
        """The pydantic-ai agent of this turn: model, instructions, server and client tools.

        Tools get this ``ChatAgent`` as ``ctx.deps`` (declare ``ctx: RunContext[MyAgent]``).
        """
        toolset = compile_tools(self.get_tools(), client_tools_from_schemas(self.client_tools))
        return Agent(
            self.get_model(),
            instructions=self.get_system_prompt(),
            tools=toolset.server,
            toolsets=[toolset.external] if toolset.external else [],
            output_type=[str, DeferredToolRequests],
            capabilities=[ToolPolicy(toolset.approval_predicates, emit=self.write)],
        )

    async def stream_model_reply(self) -> AsyncIterator[dict[str, Any]]:
        """Run the model over ``self.messages`` and yield AI SDK UI message chunks.

        A continuation resumes the last reply: its approved calls run now (the stored approvals
        become pydantic-ai's deferred results); a new prompt closes calls left unanswered.
        """
        agent = self.build_pydantic_agent()
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
                    yield data

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
