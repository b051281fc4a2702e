"""Turns started from Python code: ``save_messages``, ``continue_last_turn``, ``persist_messages``.

A programmatic turn queues behind the instance's other turns, runs on whichever process claims it,
and its caller waits for its durable status (docs/architecture.md#programmatic-turns).

* ``save_messages(messages)``: the messages wait in the turn's row and go into the transcript
  when the turn starts, after the replies of the turns before it.
* ``save_messages(fn)``: ``fn`` computes the messages when the turn starts; the turn has
  ``affinity`` to the caller's process, which claims it and beats for it while it waits.
* ``signal``: aborted before the call, the messages are still stored but no model runs.
"""

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from channels.db import database_sync_to_async
from django.db import transaction

from .. import registry, transcript, waits
from ..abort import AbortSignal
from ..agent import SaveMessagesResult
from ..messages import UIMessage, new_message_id, new_request_id
from ..models import AgentInstance, ChatMessage, Turn
from ..protocol import frames
from ..recovery import liveness
from ..streaming import fanout
from . import control, engine, lock

# Messages, or a function of the transcript (sync or async) that returns them.
MessagesOrFunction: TypeAlias = (
    list[UIMessage | str] | Callable[[list[UIMessage]], list[UIMessage | str] | Awaitable[list[UIMessage | str]]]
)

# How often a caller re-reads the status of the turn it waits for (seconds); a caller holding a
# turn's function also tries to claim it that often, and beats for it every HEARTBEAT_SECONDS.
WAIT_POLL_SECONDS = 0.05


def as_messages(items: list[UIMessage | str]) -> list[UIMessage]:
    """Plain strings become user text messages."""
    return [
        {"id": new_message_id(), "role": "user", "parts": [{"type": "text", "text": item}]}
        if isinstance(item, str) else item
        for item in items
    ]


async def save_messages(instance: AgentInstance, messages: MessagesOrFunction, *,
                        signal: AbortSignal | None = None, request_id: str | None = None,
                        user: Any = None) -> SaveMessagesResult:
    """Append messages (or what ``messages(transcript)`` returns when the turn starts) and run a turn.

    Returns when the turn has ended: ``completed``, ``error``, ``skipped`` (a clear came first) or
    ``aborted`` (``signal``). See the module docstring. ``request_id``: the turn's, when the caller
    announced it already (``chat()``); a new one otherwise. ``user``: who the turn runs for.
    """
    registry.get_agent_class(instance.slug)  # an unknown class fails here (UnknownAgent), not in the turn
    request_id = request_id or new_request_id()
    if callable(messages):
        channel = await control.channel_name()
        turn = await database_sync_to_async(_accept)(instance, None, request_id, liveness.worker_label(channel), user)
        engine.hold_message_source(turn.pk, _source(messages))
    else:
        turn = await database_sync_to_async(_accept)(instance, as_messages(messages), request_id, "", user)
    return await _run(instance, turn, signal)


def _source(function: Callable[..., Any]) -> engine.MessageSource:
    async def compute(current: list[UIMessage]) -> list[UIMessage]:
        result = function(current)
        return as_messages(await result if inspect.isawaitable(result) else result)

    return compute


def _accept(instance: AgentInstance, messages: list[UIMessage] | None, request_id: str, affinity: str,
            user: Any = None) -> Turn:
    """The queued turn; ``messages`` None: its function (in this process, ``affinity``) makes them."""
    with transaction.atomic():
        generation = lock.for_new_turn(instance.pk)
        body, client_tools = transcript.request_context(instance)
        return Turn.objects.create(
            instance=instance, request_id=request_id, kind=Turn.Kind.PROGRAMMATIC,
            generation=generation, body=body, client_tools=client_tools,
            message_ids=[m["id"] for m in messages or []], assistant_message_id=new_message_id(),
            affinity=affinity, pending_messages=True, messages_to_store=messages, user=user,
        )


async def continue_last_turn(instance: AgentInstance, body: dict[str, Any] | None = None, *,
                             signal: AbortSignal | None = None, append: bool = False) -> SaveMessagesResult:
    """Run the model on from the last reply, without a new user message (Think's ``continueLastTurn``).

    The result is a new assistant message marked ``metadata.continuation: true`` (Think's choice);
    ``append=True`` extends the last reply instead, as AIChatAgent does: the turn is a continuation
    (frames ``continuation: true``, ``start`` without ``messageId``, docs/protocol.md#server-rewrites).
    ``skipped`` with an empty request id when the transcript does not end with an assistant
    message. ``body`` defaults to the last request's.
    """
    turn = await database_sync_to_async(_accept_continue)(instance, body, append)
    if turn is None:
        return SaveMessagesResult(request_id="", status=Turn.Status.SKIPPED)
    return await _run(instance, turn, signal)


def _accept_continue(instance: AgentInstance, body: dict[str, Any] | None, append: bool) -> Turn | None:
    with transaction.atomic():
        generation = lock.for_new_turn(instance.pk)
        last_role = ChatMessage.objects.filter(instance=instance).order_by("-position").values_list(
            "role", flat=True).first()
        if last_role != "assistant":
            return None
        stored_body, client_tools = transcript.request_context(instance)
        return Turn.objects.create(
            instance=instance, request_id=new_request_id(), kind=Turn.Kind.CONTINUE,
            generation=generation, body=stored_body if body is None else body,
            client_tools=client_tools, assistant_message_id=new_message_id(), continuation=append,
        )


async def persist_messages(instance: AgentInstance, messages: list[UIMessage | str]) -> list[UIMessage]:
    """Store messages and show them to every connection; no turn runs. Returns the stored transcript."""
    policy = transcript.Policy.of(registry.agent_for(instance))
    stored = await database_sync_to_async(transcript.persist)(instance, as_messages(messages), policy=policy)
    await fanout.publish(instance.pk, frames.chat_messages(stored))
    return stored


# Cancels started by a signal's callback (asyncio keeps only weak references to tasks).
_cancels: set[asyncio.Task[Any]] = set()


async def _run(instance: AgentInstance, turn: Turn, signal: AbortSignal | None) -> SaveMessagesResult:
    """Drain the queue (the turn may run here) and wait for the turn's end, cancelling it on ``signal``."""

    def on_abort() -> None:
        task = asyncio.ensure_future(control.cancel(instance, turn.request_id, signal.reason if signal else None))
        _cancels.add(task)
        task.add_done_callback(_cancels.discard)

    if signal is not None:
        if signal.aborted:
            await control.cancel(instance, turn.request_id, signal.reason)
        else:
            signal.add_callback(on_abort)
    try:
        await engine.drain(instance.pk)
        return await _wait_finished(instance, turn)
    finally:
        engine.drop_message_source(turn.pk)
        if signal is not None:
            signal.remove_callback(on_abort)


async def _wait_finished(instance: AgentInstance, turn: Turn) -> SaveMessagesResult:
    loop = asyncio.get_running_loop()
    next_beat = loop.time() + liveness.HEARTBEAT_SECONDS
    with waits.watching([instance.pk]) as watch:
        while True:
            current = await Turn.objects.only("status", "error").aget(pk=turn.pk)
            if current.is_finished:
                return SaveMessagesResult(request_id=turn.request_id, status=current.status,
                                          error=current.error or None)
            if turn.affinity and current.status == Turn.Status.QUEUED:
                # Only this process can run it: claim it as soon as it is the instance's next turn.
                if loop.time() >= next_beat:
                    await database_sync_to_async(liveness.heartbeat_waiting)(turn.pk)
                    next_beat = loop.time() + liveness.HEARTBEAT_SECONDS
                await engine.drain(instance.pk)
            await watch.apause(WAIT_POLL_SECONDS)
