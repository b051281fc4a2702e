"""Tools: server tools, client tools and human-approved tools (spec cloudflare-agents.md §2.8).

An agent's ``get_tools()`` returns any mix of:

* plain functions (sync or async; their signature is the tool's JSON schema, and pydantic-ai
  validates the model's input against it) and ``pydantic_ai.Tool`` objects;
* ``tool(fn, needs_approval=...)``: a server tool that waits for the user's Approve/Reject,
  always (``True``) or when a predicate on its input says so;
* ``ClientTool(name, description, parameters)``: a tool the browser runs (``onToolCall``); the
  turn ends with its part ``input-available`` and the client's ``cf_agent_tool_result`` answers it.

Tools whose schemas the client sends as ``clientTools`` are client tools too. ``ToolPolicy`` is
the pydantic-ai capability that applies the rules around every server tool call.
"""

import dataclasses
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import ApprovalRequired, CallDeferred, ModelRetry, RunContext, SkipToolExecution, Tool, ToolFailed
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset

Predicate = Callable[[dict[str, Any]], bool]
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
    """What ``get_tools()`` and the request's client tools compile to for one model run."""

    server: list[Tool[Any]]
    external: ExternalToolset[Any] | None
    approval_predicates: dict[str, Predicate]
    client_names: frozenset[str]


def _function_tool(function: Callable[..., Any], **options: Any) -> Tool[Any]:
    """A pydantic-ai Tool; a progress-streaming (async generator) tool's return has no schema."""
    if not inspect.isasyncgenfunction(function):
        return Tool(function, **options)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Could not generate return schema", category=UserWarning)
        return Tool(function, **options)


def compile_tools(declared: list[Any], client: list[ClientTool]) -> Toolset:
    """Split declared tools into pydantic-ai function tools and one external (client) toolset.

    Client tools come last and win a name clash, as in the reference's merge order (spec §5.1).
    """
    client_all = [t for t in declared if isinstance(t, ClientTool)] + client
    client_by_name = {t.name: t for t in client_all}
    server: list[Tool[Any]] = []
    predicates: dict[str, Predicate] = {}
    for entry in declared:
        if isinstance(entry, ClientTool):
            continue
        if isinstance(entry, ServerTool):
            if entry.tool_name in client_by_name:
                continue
            server.append(_function_tool(entry.function, name=entry.name, description=entry.description,
                                         requires_approval=entry.needs_approval is True))
            if callable(entry.needs_approval):
                predicates[entry.tool_name] = entry.needs_approval
        elif isinstance(entry, Tool):
            if entry.name not in client_by_name:
                server.append(entry)
        elif callable(entry):
            if getattr(entry, "__name__", "") not in client_by_name:
                server.append(_function_tool(entry))
        else:
            raise TypeError(f"get_tools() entry {entry!r} is not a function, Tool, tool(...) or ClientTool")
    external = ExternalToolset([
        ToolDefinition(name=t.name, description=t.description, parameters_json_schema=t.parameters)
        for t in client_by_name.values()
    ]) if client_by_name else None
    return Toolset(server, external, predicates, frozenset(client_by_name))


@dataclass
class ToolPolicy(AbstractCapability[Any]):
    """The rules around every server tool call.

    * An approval predicate that holds for the input defers the call to the user.
    * A tool that raises gives the model a structured error (``tool-output-error``) and the turn
      goes on; pydantic-ai's own signals pass through.
    * A tool written as an async generator streams each value as a preliminary output
      (``preliminary: true``); its last value is the output.
    """

    approval_predicates: dict[str, Predicate] = dataclasses.field(default_factory=dict)
    emit: Callable[[dict[str, Any]], Any] | None = None

    async def before_tool_execute(self, ctx: RunContext[Any], *, call: Any, tool_def: ToolDefinition,
                                  args: dict[str, Any]) -> dict[str, Any]:
        predicate = self.approval_predicates.get(call.tool_name)
        if predicate is not None and not ctx.tool_call_approved and predicate(args):
            raise ApprovalRequired()
        return args

    async def wrap_tool_execute(self, ctx: RunContext[Any], *, call: Any, tool_def: ToolDefinition,
                                args: dict[str, Any], handler: Any) -> Any:
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
