"""An agent as a tool of another: ``agent_tool(ResearchAgent, name="research")`` in ``get_tools()``.

When the parent's model calls the tool with a ``task``, a sub-agent of the parent runs a full turn
on it (``AgentHandle.chat``, on any process); its text streams to the parent's client as the
tool's preliminary output (``tool-output-available`` with ``preliminary: true``), and its final
text is the tool's result, which the parent's model reads. Cancelling the parent's turn cancels
the sub-agent's. ``delegate_to`` makes the same hand-over an action's ``execute`` (the kind
``delegated-agent``).
"""

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai import RunContext

from .actions.context import ActionContext, TurnState
from .messages import UIMessage, new_message_id
from .tools import ServerTool, tool

if TYPE_CHECKING:
    from .agent import ChatAgent

# The tool's progress goes out at most this often (seconds): each update carries the text so far.
PROGRESS_INTERVAL = 0.1


class _Relay:
    """The ``chat()`` callback: the sub-agent's text as it grows, and how its turn ended."""

    def __init__(self) -> None:
        self.text = ""
        self.changed = asyncio.Event()
        self.error: str | None = None
        self.interrupted = False

    def on_event(self, chunk: str) -> None:
        data = json.loads(chunk)
        if data.get("type") == "text-delta":
            self.text += str(data.get("delta", ""))
            self.changed.set()

    def on_error(self, message: str) -> None:
        self.error = message

    def on_interrupted(self) -> None:
        self.interrupted = True


# ``metadata.source`` of the task a parent agent hands its sub-agent: the child's chat page shows it
# as from the parent agent (``metadata.agent``, its slug), not from the user.
AGENT_SOURCE = "agent"


def task_message(parent_slug: str, task: str) -> UIMessage:
    """The sub-agent's user message for ``task``, marked as the parent agent's."""
    return {"id": new_message_id(), "role": "user", "parts": [{"type": "text", "text": task}],
            "metadata": {"source": AGENT_SOURCE, "agent": parent_slug}}


def agent_tool(agent_class: type["ChatAgent"], *, name: str, description: str,
               instance_name: Callable[[str], str] | None = None) -> ServerTool:
    """A tool of the parent agent that hands a task to a sub-agent of class ``agent_class``.

    ``instance_name(tool_call_id)`` names the sub-agent that runs a call: by default one per call
    (``<name>-<tool call id>``, a fresh transcript each time); return a constant to keep one
    sub-agent (and its memory) for every call. Build the tool once (a module constant) and return
    it from ``get_tools()``: its schema is then made once.
    """

    async def run(ctx: RunContext[TurnState[Any]], task: str) -> AsyncIterator[dict[str, Any] | str]:
        call_id = ctx.tool_call_id or ""
        child = await ctx.deps.agent.sub_agent(
            agent_class, instance_name(call_id) if instance_name is not None else f"{name}-{call_id}")
        relay = _Relay()
        signal = ctx.deps.abort_signal.child()  # the parent's cancel cancels the sub-agent's turn
        running = asyncio.ensure_future(child.chat(task_message(type(ctx.deps.agent).slug(), task), relay,
                                                   signal=signal))
        try:
            sent = ""
            while not running.done():
                with_news = asyncio.ensure_future(relay.changed.wait())
                await asyncio.wait({running, with_news}, return_when=asyncio.FIRST_COMPLETED)
                with_news.cancel()
                relay.changed.clear()
                if relay.text != sent:
                    sent = relay.text
                    yield {"agent": agent_class.slug(), "instance": child.name, "status": "running", "text": sent}
                    await asyncio.sleep(PROGRESS_INTERVAL)
            result = await running
        finally:
            if not running.done():
                signal.abort("The parent's turn was cancelled")
                await asyncio.shield(running)
        yield _final_text(agent_class, result, relay)

    run.__name__ = name
    run.__doc__ = description
    return tool(run, name=name, description=description)


def _final_text(agent_class: type["ChatAgent"], result: Any, relay: _Relay) -> str:
    """The sub-agent's reply, or the error its turn ended with (the caller's model reads either)."""
    if result.status != "completed":
        raise RuntimeError(relay.error or f"{agent_class.slug()} ended {result.status}"
                           + (" (interrupted; its recovery goes on)" if relay.interrupted else ""))
    return relay.text


def delegate_to(agent_class: type["ChatAgent"], *, task: Callable[[Any], str] | None = None,
                instance_name: Callable[[Any, ActionContext], str] | None = None) -> Callable[..., Any]:
    """The ``execute`` of a ``delegated-agent`` action: a turn of a sub-agent of class ``agent_class``.

    ``action(kind="delegated-agent", execute=delegate_to(ResearchAgent, task=lambda input: input.topic))``
    (docs/architecture.md#delegated-agent-actions). Every rule of actions applies around it
    (authorization, approval, the ledger, the timeout: raise ``timeout_ms`` for long tasks); the
    action's signal cancels the sub-agent's turn. ``task(input)`` is the sub-agent's message
    (default: the input as JSON); ``instance_name(input, ctx)`` names the sub-agent (default: one
    per call, ``<action>-<tool call id>``). The result is the sub-agent's final text.
    """

    async def execute(input: Any, ctx: ActionContext) -> str:
        name = instance_name(input, ctx) if instance_name is not None else f"{ctx.action}-{ctx.tool_call_id}"
        child = await cast("ChatAgent", ctx.agent).sub_agent(agent_class, name)
        text = task(input) if task is not None else json.dumps(input.model_dump(mode="json"))
        relay = _Relay()
        chatting = asyncio.ensure_future(child.chat(task_message(type(ctx.agent).slug(), text), relay,
                                                    signal=ctx.signal))
        # A timeout or the turn's cancel aborts ``ctx.signal`` (which cancels the sub-agent's turn),
        # then cancels this coroutine: the chat goes on until that turn has ended, not cut mid-way.
        chatting.add_done_callback(lambda done: done.cancelled() or done.exception())
        result = await asyncio.shield(chatting)
        return _final_text(agent_class, result, relay)

    execute.delegates_to = agent_class  # type: ignore[attr-defined]  # what action() checks the kind by
    return execute

