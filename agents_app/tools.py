"""Tools: server tools, client tools and human-approved tools (docs/architecture.md#tools).

An agent's ``get_tools()`` returns any mix of:

* plain functions (sync or async; their signature is the tool's JSON schema, and pydantic-ai
  validates the model's input against it) and ``pydantic_ai.Tool`` objects;
* ``tool(fn, needs_approval=...)``: a server tool that waits for Approve / Reject, always or when
  a predicate on its input (a plain or an async function) says so;
* ``ClientTool(name, description, parameters)``: a tool the browser runs (``onToolCall``), as do
  tools the client sends as ``clientTools``. ``ToolPolicy`` applies the rules around every server
  tool call.
"""

import dataclasses
import functools
import inspect
import logging
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic_ai import ApprovalRequired, CallDeferred, ModelRetry, RunContext, SkipToolExecution, Tool, ToolFailed
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset

from .hooks import ToolCall, ToolCallDecision

logger = logging.getLogger("agents_app.tools")

# ``needs_approval``'s per-call answer: a plain or an async function of the call's arguments.
Predicate = Callable[[dict[str, Any]], bool | Awaitable[bool]]
# Asked before a call runs: does it wait for the user's approval? (``ctx``, validated arguments).
ApprovalGate = Callable[[RunContext[Any], dict[str, Any]], Awaitable[bool]]
# Exceptions pydantic-ai uses as signals; they pass through ToolPolicy untouched.
_SIGNALS = (ApprovalRequired, CallDeferred, ModelRetry, SkipToolExecution, ToolFailed)


@dataclass(frozen=True)
class ServerTool:
    """A Python function the model may call, optionally gated by the user's approval."""

    function: Callable[..., Any]
    name: str | None = None
    description: str | None = None
    needs_approval: bool | Predicate = False

    @property
    def tool_name(self) -> str:
        return self.name or self.function.__name__


def tool(
    function: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
    needs_approval: bool | Predicate = False,
) -> Any:
    """Declare a server tool; usable bare (``tool(fn, ...)``) or as a decorator (``@tool(...)``)."""
    def wrap(fn: Callable[..., Any]) -> ServerTool:
        return ServerTool(fn, name=name, description=description, needs_approval=needs_approval)

    return wrap(function) if function is not None else wrap


@dataclass(frozen=True)
class ClientTool:
    """A tool the browser implements: declared here so the model can call it."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


def client_tools_from_schemas(schemas: list[dict[str, Any]] | None) -> list[ClientTool]:
    """The ``clientTools`` of a request (``[{name, description?, parameters?}]``) as ClientTools."""
    return [
        ClientTool(s["name"], s.get("description") or "", s.get("parameters") or {"type": "object", "properties": {}})
        for s in schemas or []
    ]


@dataclass
class Toolset:
    """What ``get_tools()``, ``get_actions()`` and the request's client tools compile to for one model run."""

    server: list[Tool[Any]]
    external: ExternalToolset[Any] | None
    approval_gates: dict[str, ApprovalGate]
    client_names: frozenset[str]


# Compiled function tools kept (building one generates its JSON schema, every turn otherwise).
FUNCTION_TOOL_CACHE_SIZE = 512


@functools.lru_cache(maxsize=FUNCTION_TOOL_CACHE_SIZE)
def _function_tool(function: Callable[..., Any], **options: Any) -> Tool[Any]:
    """A pydantic-ai Tool, built once per function and options; a progress-streaming (async
    generator) tool's return has no schema."""
    if not inspect.isasyncgenfunction(function):
        return Tool(function, **options)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Could not generate return schema", category=UserWarning)
        return Tool(function, **options)


def _predicate_gate(predicate: Predicate) -> ApprovalGate:
    async def gate(ctx: RunContext[Any], args: dict[str, Any]) -> bool:
        # An async predicate's coroutine is truthy: its answer is what it returns once awaited.
        answer = predicate(args)
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer)

    return gate


def compile_tools(declared: list[Any], client: list[ClientTool], actions: dict[str, Tool[Any]] | None = None,
                  action_gates: dict[str, ApprovalGate] | None = None) -> Toolset:
    """Split declared tools into pydantic-ai function tools and one external (client) toolset.

    The merge order is the reference's: ``get_tools()`` < actions < client tools; a
    later source wins a name clash. ``actions`` are the compiled action tools by name, and
    ``action_gates`` the approval gates of the approval-gated ones.
    """
    actions = actions or {}
    client_all = [t for t in declared if isinstance(t, ClientTool)] + client
    client_by_name = {t.name: t for t in client_all}
    server: dict[str, Tool[Any]] = {}
    gates: dict[str, ApprovalGate] = {}
    for entry in declared:
        if isinstance(entry, ClientTool):
            continue
        if isinstance(entry, ServerTool):
            server[entry.tool_name] = _function_tool(entry.function, name=entry.name, description=entry.description,
                                                     requires_approval=entry.needs_approval is True)
            if callable(entry.needs_approval):
                gates[entry.tool_name] = _predicate_gate(entry.needs_approval)
        elif isinstance(entry, Tool):
            server[entry.name] = entry
        elif callable(entry):
            server[entry.__name__] = _function_tool(entry)
        else:
            raise TypeError(f"get_tools() entry {entry!r} is not a function, Tool, tool(...) or ClientTool")
    for name, compiled in actions.items():
        server[name] = compiled
        gates.pop(name, None)
    gates.update(action_gates or {})
    for name in client_by_name:
        server.pop(name, None)
        gates.pop(name, None)
    external = ExternalToolset([
        ToolDefinition(name=t.name, description=t.description, parameters_json_schema=t.parameters)
        for t in client_by_name.values()
    ]) if client_by_name else None
    return Toolset(list(server.values()), external, gates, frozenset(client_by_name))


@dataclass
class ToolPolicy(AbstractCapability[Any]):
    """The rules around every server tool and action call, in this order.

    * An approval gate that holds for the input defers the call to the user (unless approved);
      a gate that raises fails the call.
    * ``before_tool_call`` of the agent may allow (optionally with another input), block or
      substitute the call; ``after_tool_call`` observes the output (``agents_app.hooks``).
    * A tool that raises gives the model a structured error (``tool-output-error``) and the turn
      goes on; pydantic-ai's own signals pass through.
    * A tool written as an async generator streams each value as a preliminary output
      (``preliminary: true``); its last value is the output.
    """

    agent: Any = None
    approval_gates: dict[str, ApprovalGate] = dataclasses.field(default_factory=dict)
    # Tools whose single argument is a pydantic model (actions): hooks see and return its JSON.
    models: dict[str, type[BaseModel]] = dataclasses.field(default_factory=dict)
    emit: Callable[[dict[str, Any]], Any] | None = None

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: Any, tool_def: ToolDefinition,
                                args: dict[str, Any], handler: Any) -> Any:
        name = call.tool_name
        announcements = getattr(ctx.deps, "announcements", None)
        if announcements is not None and call.tool_call_id:
            # Nothing of the call runs before the turn has stored it (``CallAnnouncements``).
            await announcements.wait(call.tool_call_id)
        gate = self.approval_gates.get(name)
        if gate is not None and not ctx.tool_call_approved and await self._must_ask(gate, ctx, args):
            raise ApprovalRequired()
        seen = ToolCall(tool_name=name, tool_call_id=call.tool_call_id or "", input=self._hook_input(name, args),
                        approved=ctx.tool_call_approved)
        decision = await self._before(seen)
        if decision is not None and decision.action == "block":
            result: Any = decision.reason
        elif decision is not None and decision.action == "substitute":
            result = decision.output
        else:
            if decision is not None and decision.input is not None:
                args = self._with_input(name, decision.input)
            result = await self._run(call, args, handler)
        if self.agent is not None:
            try:
                await self.agent.after_tool_call(seen, result)
            except Exception:  # an observer's bug must not change what the model gets (logged)
                logger.exception("after_tool_call of %s raised", name)
        return result

    async def _must_ask(self, gate: ApprovalGate, ctx: RunContext[Any], args: dict[str, Any]) -> bool:
        """The gate's answer; a gate that raises fails the call, which never runs unasked."""
        try:
            return await gate(ctx, args)
        except _SIGNALS:
            raise
        except Exception as exc:
            raise ToolFailed(f"{type(exc).__name__}: {exc}") from exc

    async def _before(self, call: ToolCall) -> ToolCallDecision | None:
        """The agent's decision; a hook that raises fails the call like a failing tool would."""
        if self.agent is None:
            return None
        try:
            decision = await self.agent.before_tool_call(call)
            if decision is None or isinstance(decision, ToolCallDecision):
                return decision
            return ToolCallDecision(**decision)
        except Exception as exc:
            raise ToolFailed(f"before_tool_call: {type(exc).__name__}: {exc}") from exc

    def _hook_input(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name in self.models and isinstance(args.get("input"), BaseModel):
            return args["input"].model_dump(mode="json")
        return dict(args)

    def _with_input(self, name: str, new_input: dict[str, Any]) -> dict[str, Any]:
        model = self.models.get(name)
        return {"input": model.model_validate(new_input)} if model is not None else new_input

    async def _run(self, call: Any, args: dict[str, Any], handler: Any) -> Any:
        try:
            result = await handler(args)
            if inspect.isasyncgen(result):
                result = await self._preliminary(call.tool_call_id, result)
        except _SIGNALS:
            raise
        except Exception as exc:  # a failing tool is reported to the model, never crashes the turn
            raise ToolFailed(f"{type(exc).__name__}: {exc}") from exc
        return result

    async def _preliminary(self, tool_call_id: str, results: Any) -> Any:
        last = None
        async for value in results:
            last = value
            if self.emit is not None:
                await self.emit({"type": "tool-output-available", "toolCallId": tool_call_id,
                                 "output": value, "preliminary": True})
        return last
