"""Methods of an agent that a client may call over its WebSocket (the ``rpc`` frames, docs/protocol.md#rpc-frames).

``{"type": "rpc", "id", "method", "args"}`` calls a method marked ``@callable`` on a fresh agent
object of the instance (outside any turn; ``self.handle`` reaches the instance) with ``args``;
the answer is ``{"done": true, "id", "result", "success": true, "type": "rpc"}``, or
``{"error", "id", "success": false, "type": "rpc"}`` with ``Method X does not exist``, ``Method X
is not callable``, or what the method raised. Results are made JSON-safe.

The durable-pause decisions are built in, as Think registers them (``pendingApprovals``,
``approveExecution``, ``rejectExecution``; snake_case names work too), for users allowed to
approve (``approvals.can_approve``); for anyone else they are not callable.
"""

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from channels.db import database_sync_to_async

from . import registry
from .actions.envelopes import to_json_safe
from .approvals import service as approvals
from .models import AgentInstance
from .protocol import frames
from .protocol.parse import RpcCall

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "_agents_app_callable"


def callable(method: F) -> F:
    """Let clients call this agent method over the WebSocket (``agent.call("method", [args])``).

    Named as the reference's decorator; a module that also needs Python's builtin ``callable``
    imports this one under another name.
    """
    setattr(method, _MARK, True)
    return method


class RpcError(Exception):
    """A call that cannot be answered with a result; its message is the answer's ``error``."""


def _built_ins(instance: AgentInstance, user: Any) -> dict[str, Callable[..., Awaitable[Any]]]:
    handle = registry.agent_for(instance).handle

    async def approve(execution_id: str) -> Any:
        return await handle.approve_execution(execution_id, actor=user)

    async def reject(execution_id: str, reason: str | None = None) -> Any:
        return await handle.reject_execution(execution_id, reason, actor=user)

    calls: dict[str, Callable[..., Awaitable[Any]]] = {
        "pendingApprovals": handle.pending_approvals, "approveExecution": approve, "rejectExecution": reject,
    }
    calls |= {"pending_approvals": handle.pending_approvals, "approve_execution": approve, "reject_execution": reject}
    return calls


BUILT_IN = frozenset({"pendingApprovals", "approveExecution", "rejectExecution",
                      "pending_approvals", "approve_execution", "reject_execution"})


async def call(instance: AgentInstance, user: Any, method: str, args: list[Any]) -> Any:
    """Run one call; returns its JSON-safe result.

    Raises:
        RpcError: no such method, a method not marked callable (or a built-in for a user who may
            not approve), or what the method raised (its message).
    """
    if method in BUILT_IN:
        if not await database_sync_to_async(approvals.can_approve)(user):
            raise RpcError(f"Method {method} is not callable")
        target: Callable[..., Any] = _built_ins(instance, user)[method]
    else:
        agent = registry.agent_for(instance)
        found = getattr(type(agent), method, None) if not method.startswith("_") else None
        if found is None:
            raise RpcError(f"Method {method} does not exist")
        if not getattr(found, _MARK, False):
            raise RpcError(f"Method {method} is not callable")
        target = getattr(agent, method)
        await agent.load_messages()  # ``self.messages`` outside a turn, as the reference's callables see it
    try:
        result = target(*args)
        if inspect.isawaitable(result):
            result = await result
    except TypeError as exc:
        raise RpcError(f"Method {method}: {exc}") from exc
    except Exception as exc:  # the caller gets the method's error, the connection goes on
        raise RpcError(str(exc) or type(exc).__name__) from exc
    return to_json_safe(result)


async def answer(instance: AgentInstance, user: Any, request: RpcCall) -> frames.Frame:
    """The ``rpc`` frame that answers ``request``."""
    try:
        result = await call(instance, user, request.method, request.args)
    except RpcError as exc:
        return frames.rpc_error(call_id=request.call_id, error=str(exc))
    return frames.rpc_result(call_id=request.call_id, result=result)
