"""``action()``: a declared, guarded side effect the model may call (docs/architecture.md#declaring-an-action).

An action carries its policies as data: the permissions it requires, whether the user must approve
it (inline, or parked: ``durable-pause``), an idempotency key for the ledger, and a timeout. The
pipeline (``actions/pipeline.py``) enforces them; this module describes them, validates them when
the action is defined (so a bad action fails at import, not mid-conversation), and evaluates the
policy callbacks. Nothing here touches the database. A plain-function callback runs through
``sync_to_async`` (thread-sensitive), so it may use the ORM without blocking the event loop.
"""

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar, overload

from asgiref.sync import sync_to_async
from pydantic import BaseModel

from ..errors import EMPTY_KEY_MESSAGE, AgentConfigurationError
from .envelopes import to_json_safe

__all__ = [
    "ACTION_KINDS",
    "APPROVAL_RISKS",
    "DEFAULT_ACTION_TIMEOUT_MS",
    "UNSUPPORTED_ACTION_KINDS",
    "Action",
    "ActionKind",
    "ApprovalRisk",
    "action",
    "approval_descriptor",
    "call_maybe_async",
    "compile_actions",
    "evaluate_approval",
    "is_action",
    "resolve_idempotency_key",
    "resolve_permissions",
]

# How long ``execute`` may run before the model gets a timeout envelope, in milliseconds
# (30 s for every kind, approved durable-pause runs included). Per action:
# ``action(timeout_ms=...)``; ``<= 0`` disables the timer.
DEFAULT_ACTION_TIMEOUT_MS: Final = 30_000

ActionKind: TypeAlias = Literal["server", "approval-gated", "durable-pause", "delegated-agent"]
ACTION_KINDS: Final[tuple[ActionKind, ...]] = ("server", "approval-gated", "durable-pause", "delegated-agent")
# The reference's design lists one more kind, which its code runs as ``server``. We refuse it at
# definition rather than run a silent stand-in, and say what to write instead
# (docs/architecture.md#declaring-an-action).
UNSUPPORTED_ACTION_KINDS: Final[dict[str, str]] = {
    "client": (
        'kind "client" is not supported: a call the browser resolves is a client tool. Declare it as '
        "ClientTool(name, description, parameters) in get_tools() (or let the client send it in clientTools); "
        "the ledger and server-side approval do not apply to a call the server never runs."
    ),
}
# What a ``delegated-agent`` action without a delegation is told.
_DELEGATED_NEEDS_AGENT = (
    'Action "{name}": kind "delegated-agent" runs a sub-agent turn: give it execute=delegate_to(ChildAgent, ...) '
    "(agents_app.agent_tools), not a function of your own."
)
ApprovalRisk: TypeAlias = Literal["low", "medium", "high"]
APPROVAL_RISKS: Final[tuple[ApprovalRisk, ...]] = ("low", "medium", "high")

InputT = TypeVar("InputT", bound=BaseModel)

# ``(input, ctx)`` policies; each may also be a coroutine function.
PermissionsPolicy: TypeAlias = Callable[[Any, Any], Sequence[str] | Awaitable[Sequence[str]]]
ApprovalPolicy: TypeAlias = Callable[[Any, Any], bool | Awaitable[bool]]
IdempotencyKeyPolicy: TypeAlias = Callable[[Any, Any], str | Awaitable[str]]
ExecuteFn: TypeAlias = Callable[[Any, Any], Any]

_DURABLE_PAUSE_NEVER_PARKS = (
    'Action "{name}": kind "durable-pause" with approval: false never parks for approval, defeating the '
    'purpose. Use kind "server" for an inline action, or omit approval (or set a predicate) to gate when it parks.'
)


@dataclass(frozen=True, kw_only=True)
class Action(Generic[InputT]):
    """One action, as ``action()`` validated it. Frozen: agents share it across turns and threads.

    ``kind`` is already inferred. ``name`` is None until ``compile_actions`` fills in the
    ``get_actions()`` key; every ``Action`` the pipeline sees has one.
    """

    # The tool name the model calls; default: the ``get_actions()`` key.
    name: str | None
    # What the model reads to decide whether to call it; also the default approval summary.
    description: str
    # The model's arguments are validated into this model; ``execute`` receives the instance.
    input_schema: type[InputT]
    # When set, ``execute``'s return value is validated (and serialised) by it. (The reference
    # keeps outputSchema as unenforced metadata; a Python port can afford to check it.)
    output_schema: type[BaseModel] | None
    # Permissions the call requires: a fixed tuple, or ``(input, ctx) -> list[str]``.
    permissions: tuple[str, ...] | PermissionsPolicy
    # None: no approval policy (``server`` asks nobody; ``durable-pause`` always parks).
    # True/False, or ``(input, ctx) -> bool`` deciding per call.
    approval: bool | ApprovalPolicy | None
    # The approval card's text; None means ``description``.
    approval_summary: str | None
    approval_risk: ApprovalRisk | None
    # The ledger key: fixed, or ``(input, ctx) -> str``; None falls back to the tool call id.
    idempotency_key: str | IdempotencyKeyPolicy | None
    # Milliseconds ``execute`` may run; ``<= 0`` means no timeout.
    timeout_ms: float
    kind: ActionKind
    # ``(input, ctx) -> output``, sync or async.
    execute: ExecuteFn

    @property
    def summary(self) -> str:
        """The approval summary: ``approval_summary``, else ``description``."""
        return self.description if self.approval_summary is None else self.approval_summary

    @property
    def approval_configured(self) -> bool:
        """Whether the call asks for approval before running inline (the reference's ``needsApproval``).

        True iff an approval policy is set and the action does not park: a durable-pause action
        uses its policy as a park gate instead. (Note that ``kind="approval-gated"`` without an
        ``approval`` never prompts, as in the reference.)
        """
        return self.approval is not None and self.kind != "durable-pause"

    @property
    def timeout_seconds(self) -> float | None:
        """The timeout for ``asyncio.timeout``; None when disabled (``timeout_ms <= 0``)."""
        return self.timeout_ms / 1000 if self.timeout_ms > 0 else None

    def parameters_json_schema(self) -> dict[str, Any]:
        """The JSON schema of the tool's arguments, as the model is shown it."""
        return self.input_schema.model_json_schema()

    def validate_input(self, arguments: Any) -> InputT:
        """The model's arguments as an ``input_schema`` instance; raises ``pydantic.ValidationError``."""
        if isinstance(arguments, self.input_schema):
            return arguments
        return self.input_schema.model_validate(arguments)

    def validate_output(self, value: Any) -> Any:
        """``value`` checked against ``output_schema`` and returned as its JSON form; unchanged without one.

        Raises ``pydantic.ValidationError``, which the pipeline treats like ``execute`` raising.
        """
        if self.output_schema is None:
            return value
        return self.output_schema.model_validate(value).model_dump(mode="json")


@overload
def action(
    *, description: str, input_schema: type[InputT], execute: ExecuteFn, name: str | None = None,
    output_schema: type[BaseModel] | None = None, permissions: Sequence[str] | PermissionsPolicy = (),
    approval: bool | ApprovalPolicy | None = None, approval_summary: str | None = None,
    approval_risk: ApprovalRisk | None = None, idempotency_key: str | IdempotencyKeyPolicy | None = None,
    timeout_ms: float = DEFAULT_ACTION_TIMEOUT_MS, kind: ActionKind | None = None,
) -> Action[InputT]: ...


@overload
def action(
    *, description: str, input_schema: type[InputT], execute: None = None, name: str | None = None,
    output_schema: type[BaseModel] | None = None, permissions: Sequence[str] | PermissionsPolicy = (),
    approval: bool | ApprovalPolicy | None = None, approval_summary: str | None = None,
    approval_risk: ApprovalRisk | None = None, idempotency_key: str | IdempotencyKeyPolicy | None = None,
    timeout_ms: float = DEFAULT_ACTION_TIMEOUT_MS, kind: ActionKind | None = None,
) -> Callable[[ExecuteFn], Action[InputT]]: ...


def action(
    *,
    description: str,
    input_schema: type[InputT],
    execute: ExecuteFn | None = None,
    name: str | None = None,
    output_schema: type[BaseModel] | None = None,
    permissions: Sequence[str] | PermissionsPolicy = (),
    approval: bool | ApprovalPolicy | None = None,
    approval_summary: str | None = None,
    approval_risk: ApprovalRisk | None = None,
    idempotency_key: str | IdempotencyKeyPolicy | None = None,
    timeout_ms: float = DEFAULT_ACTION_TIMEOUT_MS,
    kind: ActionKind | None = None,
) -> Action[InputT] | Callable[[ExecuteFn], Action[InputT]]:
    """Declare an action; raises ``AgentConfigurationError`` if the declaration is wrong.

    ``kind`` defaults by the truthiness of ``approval``, as the reference infers it:
    ``"approval-gated"`` for ``True`` or a predicate, ``"server"`` otherwise, and
    ``"delegated-agent"`` for an ``execute`` made by ``agent_tools.delegate_to(...)`` (a sub-agent
    turn), which that kind requires.
    The reference's ``client`` is refused (``UNSUPPORTED_ACTION_KINDS`` says what to use).
    ``kind="durable-pause"`` with ``approval=False`` is refused, since it could never park;
    without ``approval`` it always parks (docs/architecture.md#reference-discrepancies).

    Without ``execute`` it returns a decorator, so an action can be written as::

        @action(description="Refund an order", input_schema=RefundInput, approval=True)
        async def refund_order(input: RefundInput, ctx: ActionContext) -> str: ...

    The declaration is validated before the decorator is returned, so errors point at it.
    """
    shown = name if name is not None else "(anonymous)"
    _check_declaration(
        shown, name=name, description=description, input_schema=input_schema, output_schema=output_schema,
        permissions=permissions, approval=approval, approval_summary=approval_summary,
        approval_risk=approval_risk, idempotency_key=idempotency_key, timeout_ms=timeout_ms, kind=kind,
    )
    resolved_kind: ActionKind = kind or ("approval-gated" if approval else "server")

    def build(function: ExecuteFn) -> Action[InputT]:
        if not callable(function):
            raise AgentConfigurationError(f'Action "{shown}": execute must be callable, not {function!r}.')
        delegates = getattr(function, "delegates_to", None) is not None
        if kind == "delegated-agent" and not delegates:
            raise AgentConfigurationError(_DELEGATED_NEEDS_AGENT.format(name=shown))
        if delegates and kind not in (None, "delegated-agent"):
            raise AgentConfigurationError(f'Action "{shown}": execute=delegate_to(...) is kind "delegated-agent", '
                                          f'not "{kind}".')
        return Action(
            name=name, description=description, input_schema=input_schema, output_schema=output_schema,
            permissions=permissions if callable(permissions) else tuple(permissions), approval=approval,
            approval_summary=approval_summary, approval_risk=approval_risk, idempotency_key=idempotency_key,
            timeout_ms=timeout_ms, kind="delegated-agent" if delegates else resolved_kind, execute=function,
        )

    return build if execute is None else build(execute)


def _check_declaration(shown: str, **config: Any) -> None:
    """Refuse a declaration that could never work, naming the action (``(anonymous)`` before compile)."""

    def fail(problem: str) -> AgentConfigurationError:
        return AgentConfigurationError(f'Action "{shown}": {problem}')

    name, kind, approval = config["name"], config["kind"], config["approval"]
    if name is not None and (not isinstance(name, str) or not name):
        raise fail("name must be a non-empty string (or omitted, to use the get_actions() key).")
    if not isinstance(config["description"], str):
        raise fail("description must be a string.")
    for field in ("input_schema", "output_schema"):
        schema = config[field]
        if (schema is not None or field == "input_schema") and not (
            isinstance(schema, type) and issubclass(schema, BaseModel)
        ):
            raise fail(f"{field} must be a pydantic BaseModel subclass, not {schema!r}.")
    permissions = config["permissions"]
    if not callable(permissions) and (
        isinstance(permissions, str) or not all(isinstance(p, str) for p in permissions)
    ):
        raise fail("permissions must be a list of strings or a function (input, ctx) -> list of strings.")
    if approval is not None and not isinstance(approval, bool) and not callable(approval):
        raise fail("approval must be True, False or a function (input, ctx) -> bool.")
    if config["approval_summary"] is not None and not isinstance(config["approval_summary"], str):
        raise fail("approval_summary must be a string.")
    if config["approval_risk"] is not None and config["approval_risk"] not in APPROVAL_RISKS:
        raise fail(f"approval_risk must be one of {', '.join(APPROVAL_RISKS)}, or None.")
    key = config["idempotency_key"]
    if key is not None and not callable(key) and (not isinstance(key, str) or not key):
        raise fail("idempotency_key must be a non-empty string or a function (input, ctx) -> str.")
    timeout_ms = config["timeout_ms"]
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int | float):
        raise fail("timeout_ms must be a number of milliseconds (<= 0 disables the timeout).")
    if isinstance(kind, str) and kind in UNSUPPORTED_ACTION_KINDS:
        raise fail(UNSUPPORTED_ACTION_KINDS[kind])
    if kind is not None and kind not in ACTION_KINDS:
        raise fail(f"kind must be one of {', '.join(ACTION_KINDS)}.")
    if kind == "durable-pause" and approval is False:
        raise AgentConfigurationError(_DURABLE_PAUSE_NEVER_PARKS.format(name=shown))


def is_action(value: object) -> bool:
    """Whether ``value`` was made by ``action()`` (the reference's ``isAction`` brand check)."""
    return isinstance(value, Action)


def compile_actions(actions: Mapping[str, Any]) -> dict[str, Action[Any]]:
    """Validate a ``get_actions()`` mapping; returns ``{tool name: Action}`` with every name filled in.

    The tool name is the action's ``name``, else its key. Two entries that resolve to
    the same name are refused: the reference would silently keep the later one, hiding an action
    the developer declared.
    """
    if not isinstance(actions, Mapping):
        raise AgentConfigurationError(f"get_actions() must return a dict of actions, not {type(actions).__name__}.")
    compiled: dict[str, Action[Any]] = {}
    keys: dict[str, str] = {}
    for key, entry in actions.items():
        if not is_action(entry):
            raise AgentConfigurationError(f'get_actions() entry "{key}" must be created with action().')
        name = entry.name or str(key)
        if name in compiled:
            raise AgentConfigurationError(
                f'get_actions() entries "{keys[name]}" and "{key}" both define the action "{name}".'
            )
        compiled[name] = entry if entry.name == name else dataclasses.replace(entry, name=name)
        keys[name] = str(key)
    return compiled


# --------------------------------------------------------------------------------------- policies
async def call_maybe_async(function: Callable[..., Any], *args: Any, thread_sensitive: bool = True) -> Any:
    """Call a user callback that may be sync or async, and return its result.

    A coroutine function (or an object with an ``async def __call__``) is awaited on the loop; a
    plain function runs in Django's sync thread (``sync_to_async``) so it may use the ORM.
    A plain function that returns an awaitable has it awaited too. ``thread_sensitive=False``
    runs it in a thread of its own instead: for ``execute``, which a timeout may abandon while
    it still runs, and which must not hold up every other ORM call of the process meanwhile.
    """
    if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__):
        return await function(*args)
    result = await sync_to_async(function, thread_sensitive=thread_sensitive)(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def resolve_permissions(action: Action[Any], input: Any, ctx: Any) -> list[str]:
    """The permissions this call requires: the fixed list, or the policy's answer (pipeline step 2).

    ``ctx`` should be the policy copy of the context (its ``attach_reply`` does nothing).
    Raises ``TypeError`` if a policy returns anything but a list of strings.
    """
    if not callable(action.permissions):
        return list(action.permissions)
    resolved = await call_maybe_async(action.permissions, input, ctx)
    if isinstance(resolved, str) or not isinstance(resolved, Sequence | set | frozenset) or not all(
        isinstance(p, str) for p in resolved
    ):
        raise TypeError(f'Action "{action.name}": permissions policy must return a list of strings, not {resolved!r}')
    return list(resolved)


async def evaluate_approval(action: Action[Any], input: Any, ctx: Any) -> bool:
    """Whether this call waits for a human: before running (approval-gated) or by parking (durable-pause).

    No policy: only a ``durable-pause`` action waits (it always parks). A bool
    is the answer; a predicate decides per call, by the truthiness of its result.
    """
    if action.approval is None:
        return action.kind == "durable-pause"
    if isinstance(action.approval, bool):
        return action.approval
    return bool(await call_maybe_async(action.approval, input, ctx))


async def resolve_idempotency_key(action: Action[Any], input: Any, ctx: Any) -> str | None:
    """The action's own idempotency key for this call, or None when it declares none.

    None means the ledger falls back to ``tool:<toolCallId>``. A policy returning ``""`` is a
    bug that must not silently lose idempotency: ``ValueError('Action "<name>" returned an empty
    idempotency key')``; returning a non-string raises ``TypeError``.
    """
    key = action.idempotency_key
    if key is None or isinstance(key, str):
        return key
    resolved = await call_maybe_async(key, input, ctx)
    if not isinstance(resolved, str):
        raise TypeError(f'Action "{action.name}": idempotency_key must return a string, not {resolved!r}')
    if not resolved:
        raise ValueError(EMPTY_KEY_MESSAGE.format(name=action.name))
    return resolved


def approval_descriptor(
    action: Action[Any],
    *,
    name: str | None = None,
    request_id: str,
    tool_call_id: str,
    input: Any,
    permissions: Sequence[str],
) -> dict[str, Any]:
    """The stable descriptor shown to whoever approves a call (docs/architecture.md#approval-gated-actions).

    ``{requestId, toolCallId, action, summary, input, permissions, risk?, kind}`` in that key
    order; ``risk`` is left out when the action declares none. ``input`` is stored as JSON (a
    pydantic instance as its JSON dump), since the descriptor is persisted and sent on the wire.
    ``name`` defaults to the compiled action's name.
    """
    tool_name = name or action.name
    if not tool_name:
        raise ValueError("approval_descriptor() needs the action's tool name (compile_actions() sets it)")
    descriptor: dict[str, Any] = {
        "requestId": request_id,
        "toolCallId": tool_call_id,
        "action": tool_name,
        "summary": action.summary,
        "input": input.model_dump(mode="json") if isinstance(input, BaseModel) else to_json_safe(input),
        "permissions": list(permissions),
    }
    if action.approval_risk is not None:
        descriptor["risk"] = action.approval_risk
    descriptor["kind"] = action.kind
    return descriptor
