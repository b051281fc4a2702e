"""The action pipeline: what happens on every call of an action (docs/architecture.md#action-pipeline).

``action_tool`` turns an ``Action`` into a pydantic-ai ``Tool`` whose function runs::

    (approved? input unchanged by before_tool_call) → authorize → (durable-pause: park)
    → ledger claim → execute, raced against the timeout and the turn's cancellation
    → output checked and made JSON-safe → ledger settle (or release on failure)

Whatever goes wrong becomes the model-visible error envelope: an action never crashes its turn.
``needs_approval`` is ``ToolPolicy``'s gate (it authorizes first, so a denied call never prompts
anyone); ``run_approved_pause`` runs a parked call once staff approve it, with no turn.
"""

import asyncio
import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic_ai import RunContext, Tool

from .. import events
from ..errors import ActionAbortedError, ActionApprovalInputError, ActionTimeoutError
from . import ledger
from .attachments import NO_ATTACHMENTS
from .context import ActionAgent, ActionAuthorizationContext, ActionContext, AuthorizationDecision, TurnState
from .descriptor import (
    Action,
    approval_descriptor,
    call_maybe_async,
    evaluate_approval,
    resolve_idempotency_key,
    resolve_permissions,
)
from .envelopes import (
    ACTION_OUTPUT_MAX_CHARS,
    aborted_error,
    authorization_error,
    error_envelope,
    key_conflict_error,
    pending_error,
    prepare_output,
)
from .parking import park

if TYPE_CHECKING:
    from ..models import PendingApproval

__all__ = ["action_tool", "execute_action", "input_json", "needs_approval", "run_approved_pause"]


def input_json(value: Any) -> Any:
    """An action input as JSON: what hooks, descriptors, the ledger hash and the transcript see."""
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


# Compiled action tools kept (building one generates its JSON schema: ~0.4 ms, every turn).
ACTION_TOOL_CACHE_SIZE = 512


@functools.lru_cache(maxsize=ACTION_TOOL_CACHE_SIZE)
def action_tool(action: Action[Any]) -> Tool[Any]:
    """The pydantic-ai tool of ``action``; the run's ``ctx.deps`` is the turn's ``TurnState``.

    Its single parameter is the action's ``input_schema``, so the model is shown that schema and
    pydantic-ai validates the arguments into an instance (a bad input goes back to the model as
    a retry, like any tool's). One tool serves every turn of every agent: ``Action`` is frozen.
    """

    async def run(ctx: RunContext[TurnState[Any]], input: BaseModel) -> Any:
        turn = ctx.deps
        return await execute_action(
            turn, action, input, tool_call_id=ctx.tool_call_id or "", messages=ctx.messages,
            approved_input=_approved_input(turn, ctx.tool_call_id) if ctx.tool_call_approved else None,
        )

    run.__annotations__ = {"ctx": RunContext[Any], "input": action.input_schema, "return": Any}
    return Tool(run, name=action.name, description=action.description)


def _approved_input(turn: TurnState[Any], tool_call_id: str | None) -> Any:
    """The input the user approved for this call: its descriptor's, as stored in the transcript."""
    for message in reversed(turn.messages):
        for part in message.get("parts", []):
            if part.get("toolCallId") == tool_call_id:
                descriptor = (part.get("approval") or {}).get("descriptor") or {}
                return descriptor.get("input", part.get("input"))
    return None


def _context(turn: TurnState[Any], action: Action[Any], tool_call_id: str, messages: Sequence[Any]) -> ActionContext:
    assert action.name is not None
    return ActionContext(
        agent=turn.agent, action=action.name, request_id=turn.request_id, tool_call_id=tool_call_id,
        messages=messages, signal=turn.abort_signal.child(), attachments=turn.attachments.attempt(action.name),
    )


async def _authorize(turn: TurnState[Any], action: Action[Any], input: Any, ctx: ActionContext,
                     permissions: Sequence[str]) -> AuthorizationDecision:
    """``agent.authorize_action`` for this call, normalised (docs/architecture.md#authorization)."""
    granted = turn.authorization
    decision = await call_maybe_async(turn.agent.authorize_action, ActionAuthorizationContext(
        agent=turn.agent, action=ctx.action, kind=action.kind, request_id=ctx.request_id,
        tool_call_id=ctx.tool_call_id, input=input, required_permissions=tuple(permissions),
        granted_permissions=granted.granted_permissions, turn=granted, messages=ctx.messages,
    ))
    return AuthorizationDecision.of(decision)


async def needs_approval(turn: TurnState[Any], action: Action[Any], input: Any, tool_call_id: str,
                         messages: Sequence[Any]) -> bool:
    """Whether this call of an approval-gated action must wait for the user (approval step 1).

    A call the user may not make anyway is not put to them: it runs and gets the authorization
    error. (A policy that raises fails the call: ``ToolPolicy`` never runs it unasked.)
    When it must wait, its descriptor is kept for the ``tool-approval-request`` chunk.
    """
    ctx = _context(turn, action, tool_call_id, messages).for_policy()
    permissions = await resolve_permissions(action, input, ctx)
    if not (await _authorize(turn, action, input, ctx, permissions)).allowed:
        return False
    if not await evaluate_approval(action, input, ctx):
        return False
    turn.approval_descriptors[tool_call_id] = approval_descriptor(
        action, request_id=turn.request_id, tool_call_id=tool_call_id, input=input, permissions=permissions,
    )
    _emit(events.ACTION_APPROVAL_REQUESTED, ctx, kind=action.kind)
    return True


async def execute_action(turn: TurnState[Any], action: Action[Any], input: Any, *, tool_call_id: str,
                         messages: Sequence[Any], approved_input: Any = None) -> Any:
    """One call of ``action`` inside a turn; returns what the model reads (docs/architecture.md#action-pipeline).

    ``approved_input`` is the input the user approved, when this call ran after an approval.
    """
    ctx = _context(turn, action, tool_call_id, messages)
    _emit(events.ACTION_INVOKED, ctx, kind=action.kind)
    try:
        if approved_input is not None and ledger.input_hash(input_json(input)) != ledger.input_hash(approved_input):
            raise ActionApprovalInputError()
        policy = ctx.for_policy()
        permissions = await resolve_permissions(action, input, policy)
        decision = await _authorize(turn, action, input, policy, permissions)
        granted = turn.authorization.granted_permissions
        verdict = {"required": list(permissions), "granted": None if granted is None else list(granted)}
        if not decision.allowed:
            denied = authorization_error(decision.reason, permissions)
            _emit(events.ACTION_DENIED, ctx, **verdict, reason=denied["error"]["message"])
            return denied
        _emit(events.ACTION_AUTHORIZED, ctx, **verdict)
        if ctx.signal.aborted:
            return aborted_error(ctx.signal.reason)
        if action.kind == "durable-pause" and await evaluate_approval(action, input, policy):
            _emit(events.ACTION_APPROVAL_REQUESTED, ctx, kind=action.kind)
            return await park(turn, action, input, ctx, permissions)
        return await _run_ledgered(action, input, ctx)
    except Exception as exc:  # noqa: BLE001 (the model gets the envelope, the turn goes on)
        return _failed(ctx, exc)


def _emit(event: str, ctx: ActionContext, /, **data: Any) -> None:
    """An ``action:*`` event of this call (docs/architecture.md#action-events)."""
    events.emit(event, action=ctx.action, requestId=ctx.request_id, toolCallId=ctx.tool_call_id, **data)


def _failed(ctx: ActionContext, exc: Exception) -> dict[str, Any]:
    """The envelope of a call that raised, announced as ``action:timed-out`` or ``action:error``."""
    envelope = error_envelope(exc)
    about = {key: envelope["error"][key] for key in ("name", "message")}
    _emit(events.ACTION_TIMED_OUT if isinstance(exc, ActionTimeoutError) else events.ACTION_ERROR, ctx, **about)
    return envelope


async def run_approved_pause(agent: ActionAgent, action: Action[Any], row: "PendingApproval") -> Any:
    """Run a parked call that staff approved: no turn, no re-authorization (docs/architecture.md#durable-pause).

    Authorization was checked when the call parked and the approver's decision stands. The
    context has no messages and ``attach_reply`` does nothing; the timeout and the ledger apply.
    """
    assert action.name is not None
    ctx = ActionContext(agent=agent, action=action.name, request_id=row.request_id, tool_call_id=row.tool_call_id,
                        attachments=NO_ATTACHMENTS)
    _emit(events.ACTION_INVOKED, ctx, kind=action.kind)
    try:
        input = action.validate_input(row.input if isinstance(row.input, dict) else {})
        return await _run_ledgered(action, input, ctx)
    except Exception as exc:  # noqa: BLE001 (the approver and the model get the envelope)
        return _failed(ctx, exc)


async def _run_ledgered(action: Action[Any], input: Any, ctx: ActionContext) -> Any:
    """Execute at most once per ledger key; replay a settled result (docs/architecture.md#ledger)."""
    assert action.name is not None
    explicit = await resolve_idempotency_key(action, input, ctx.for_policy())
    key = ledger.ledger_key(action.name, explicit, ctx.tool_call_id or None)
    ctx = dataclasses.replace(ctx, idempotency_key=key)

    async def execute() -> Any:
        started = time.monotonic()
        try:
            output = action.validate_output(await _execute_in_time(action, input, ctx))
        except BaseException:
            ctx.attachments.rollback()
            raise
        prepared = prepare_output(output)
        _emit(events.ACTION_SETTLED, ctx, durationMs=round((time.monotonic() - started) * 1000),
              truncated=_truncated(output, prepared))
        if _unserialisable(prepared):
            raise _Unrecorded(prepared)
        return prepared

    try:
        result = await ledger.run_once(
            key, scope=str(ctx.agent.instance.pk), action_name=action.name,
            input_hash=ledger.input_hash(input_json(input)),
            request_id=ctx.request_id, tool_call_id=ctx.tool_call_id, retryable=explicit is not None,
            lease=ledger.lease_of(ctx.agent), execute=execute,
        )
    except _Unrecorded as unrecorded:
        # The action ran, but its result cannot be stored for replays: its row is released
        # (a retry runs again) and the model gets what there is (``serialize_failed``).
        events.emit(events.LEDGER_SERIALIZE_FAILED, action=action.name, key=key)
        return unrecorded.output
    if result.outcome == "conflict":
        return key_conflict_error(key or "", action.name)
    if result.outcome == "pending":
        return pending_error()
    if result.outcome == "replayed":
        _emit(events.ACTION_REPLAYED, ctx, **{"from": "ledger"})
    return result.value


def _truncated(output: Any, prepared: Any) -> bool:
    """Whether ``prepare_output`` cut ``output`` to fit what the model reads."""
    if isinstance(output, str):
        return len(output) > ACTION_OUTPUT_MAX_CHARS
    return isinstance(prepared, dict) and prepared.keys() == {"truncated", "chars", "preview"}


class _Unrecorded(Exception):
    """``execute`` succeeded but its output could not be made JSON: nothing to store in the ledger."""

    def __init__(self, output: Any) -> None:
        super().__init__("unserialisable action output")
        self.output = output


def _unserialisable(prepared: Any) -> bool:
    """Whether ``prepare_output`` reported an output it could not serialise."""
    return isinstance(prepared, dict) and prepared.keys() == {"serialized", "error"} and prepared["serialized"] is False


async def _execute_in_time(action: Action[Any], input: Any, ctx: ActionContext) -> Any:
    """``execute``, raced against the action's timeout and the turn's cancellation.

    A plain-function ``execute`` runs in a thread of its own: if it hangs, the timeout abandons
    it there (Python cannot kill a thread) and the turn goes on.
    """
    loop = asyncio.get_running_loop()
    seconds = action.timeout_seconds
    timed_out = ActionTimeoutError(action.timeout_ms)
    expired = asyncio.Event()

    def expire() -> None:
        expired.set()
        ctx.signal.abort(str(timed_out))

    timer = loop.call_later(seconds, expire) if seconds is not None else None
    running = asyncio.ensure_future(call_maybe_async(action.execute, input, ctx, thread_sensitive=False))
    aborted = asyncio.ensure_future(ctx.signal.wait())
    try:
        await asyncio.wait({running, aborted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
        if timer is not None:
            timer.cancel()
        if not running.done():
            running.cancel()
    if running.done() and not running.cancelled():
        return running.result()
    if expired.is_set():
        raise timed_out
    raise ActionAbortedError()
