"""Transport-agnostic entry points of the turn engine.

Consumers, Celery tasks, the REST API and Python code all call these; none of them runs a model
or touches the transcript directly. Every turn is a ``Turn`` row from the moment it is accepted,
and runs through the per-instance queue (``turns.lock``): one at a time, in order, on whichever
process claims it.
"""

import asyncio
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction
from django.db.models import F

from .. import transcript
from ..agent import SaveMessagesResult
from ..messages import UIMessage, awaits_interaction, new_message_id, new_request_id, request_message_ids
from ..models import AgentInstance, Turn
from ..protocol import frames
from ..protocol.parse import ChatRequest, ProtocolError
from ..streaming import buffer, fanout
from . import control, liveness, recovery
from .engine import drain, start_drain
from .interactions import apply_tool_approval, apply_tool_result, enqueue_continuation

__all__ = [
    "accept_chat",
    "apply_tool_approval", "apply_tool_result", "cancel", "cancel_all", "clear", "drain", "enqueue_continuation",
    "has_pending_interaction", "queued_instances", "recover_interrupted", "replace_messages", "reset_turn_state",
    "save_messages", "start_drain", "submit_chat", "wait_until_stable",
]


async def submit_chat(instance: AgentInstance, request: ChatRequest, origin_channel: str, user: Any = None) -> None:
    """Accept a ``cf_agent_use_chat_request``: persist the user's messages, queue the turn.

    Order of frames as the reference server (spec §2.4): the other connections see the incoming
    transcript at once and again once persisted; the reply streams to everyone.

    Raises:
        ProtocolError: the request id already names a turn of this conversation (nothing stored).
    """
    await fanout.publish(instance.pk, frames.chat_messages(request.messages), exclude=[origin_channel])
    merged = await database_sync_to_async(_accept_chat)(instance, request, origin_channel, user)
    await fanout.publish(instance.pk, frames.chat_messages(merged), exclude=[origin_channel])
    start_drain(instance.pk)


def accept_chat(instance: AgentInstance, request: ChatRequest, user: Any = None) -> list[UIMessage]:
    """Accept a chat request that came over HTTP (``conversations.send_message``), running nothing.

    A sync caller has no event loop that outlives it to run the turn on; it hands the queue to a
    worker instead (``dispatch.DRAIN_INSTANCE``). Raises ``ProtocolError`` as ``submit_chat``.
    """
    return _accept_chat(instance, request, "", user)


def _accept_chat(instance: AgentInstance, request: ChatRequest, origin_channel: str, user: Any) -> list[UIMessage]:
    try:
        with transaction.atomic():
            merged = transcript.persist(instance, request.messages, delete_stale=True)
            transcript.store_request_context(instance, request.body, request.client_tools)
            Turn.objects.create(
                instance=instance, request_id=request.request_id, kind=Turn.Kind.CHAT,
                generation=AgentInstance.objects.generation_of(instance.pk), origin_channel=origin_channel,
                user=user if getattr(user, "is_authenticated", False) else None,
                body=request.body, client_tools=request.client_tools,
                message_ids=request_message_ids(request.messages),
                assistant_message_id=new_message_id(),
            )
    except IntegrityError:  # unique_turn_request: the whole request is rolled back
        raise ProtocolError(f"Request id {request.request_id!r} was already used in this conversation",
                            code="duplicate_request_id", request_id=request.request_id) from None
    return merged


async def save_messages(instance: AgentInstance, messages: list[UIMessage | str]) -> SaveMessagesResult:
    """Append messages and run a programmatic turn on them; return when it has finished.

    The turn runs here, or on the process that holds the instance's queue (then this waits for
    its durable status), so the result is the same wherever it ran.
    """
    ui_messages = [
        {"id": new_message_id(), "role": "user", "parts": [{"type": "text", "text": m}]}
        if isinstance(m, str) else m
        for m in messages
    ]
    turn, merged = await database_sync_to_async(_accept_programmatic)(instance, ui_messages)
    await fanout.publish(instance.pk, frames.chat_messages(merged))
    await drain(instance.pk)
    return await _wait_finished(turn.pk, turn.request_id)


def _accept_programmatic(instance: AgentInstance, messages: list[UIMessage]) -> tuple[Turn, list[UIMessage]]:
    with transaction.atomic():
        merged = transcript.persist(instance, messages)
        body, client_tools = transcript.request_context(instance)
        turn = Turn.objects.create(
            instance=instance, request_id=new_request_id(), kind=Turn.Kind.PROGRAMMATIC,
            generation=AgentInstance.objects.generation_of(instance.pk), body=body, client_tools=client_tools,
            message_ids=[m["id"] for m in messages], assistant_message_id=new_message_id(),
        )
    return turn, merged


# How often a caller waiting on a turn run by another process re-reads its status (seconds).
WAIT_POLL_SECONDS = 0.05


async def _wait_finished(turn_pk: int, request_id: str) -> SaveMessagesResult:
    while True:
        turn = await Turn.objects.only("status", "error").aget(pk=turn_pk)
        if turn.is_finished:
            return SaveMessagesResult(request_id=request_id, status=turn.status, error=turn.error or None)
        await asyncio.sleep(WAIT_POLL_SECONDS)


async def cancel(instance: AgentInstance, request_id: str) -> bool:
    """Cancel a queued or running turn by request id; False when there is no such turn."""
    turn = await database_sync_to_async(_mark_cancel)(instance, request_id)
    if turn is None:
        return False
    if turn.status == Turn.Status.RUNNING:
        await control.cancel_running(liveness.control_channel(turn), turn.pk)
    return True


def _mark_cancel(instance: AgentInstance, request_id: str) -> Turn | None:
    active = Turn.objects.of(instance).active().filter(request_id=request_id)
    active.update(cancel_requested=True)
    return active.first()


async def cancel_all(instance: AgentInstance) -> int:
    """Cancel every queued and running turn of the instance; returns how many."""
    request_ids = [rid async for rid in Turn.objects.of(instance).active().values_list("request_id", flat=True)]
    return sum([await cancel(instance, rid) for rid in request_ids])


async def clear(instance: AgentInstance, origin_channel: str) -> None:
    """Delete the transcript; skip queued turns, abort the running one; tell other connections."""
    await _reset(instance, delete_history=True)
    await fanout.publish(instance.pk, frames.chat_clear(), exclude=[origin_channel])


async def reset_turn_state(instance: AgentInstance) -> None:
    """Skip queued turns and abort the running one; the transcript stays (spec §4.4)."""
    await _reset(instance, delete_history=False)


async def _reset(instance: AgentInstance, *, delete_history: bool) -> None:
    running = await database_sync_to_async(_bump_generation)(instance, delete_history)
    for turn in running:
        await control.cancel_running(liveness.control_channel(turn), turn.pk, "Chat cleared")


def _bump_generation(instance: AgentInstance, delete_history: bool) -> list[Turn]:
    """A new generation: queued turns of the old one are skipped when claimed."""
    with transaction.atomic():
        AgentInstance.objects.filter(pk=instance.pk).update(
            generation=F("generation") + 1, terminal_request_id="", terminal_error=""
        )
        if delete_history:
            transcript.clear(instance)
            buffer.delete_all(instance)
        running = list(Turn.objects.of(instance).running())
        Turn.objects.of(instance).running().update(cancel_requested=True)
    return running


async def has_pending_interaction(instance: AgentInstance) -> bool:
    """An assistant message has a part waiting on the user (an approval or a tool result)."""
    messages = await database_sync_to_async(transcript.load)(instance)
    return any(
        awaits_interaction(part)
        for message in messages if message.get("role") == "assistant"
        for part in message.get("parts", [])
    )


# How often wait_until_stable looks again (seconds).
STABLE_POLL_SECONDS = 0.05


async def wait_until_stable(instance: AgentInstance, timeout: float) -> bool:  # noqa: ASYNC109 - returns False at the deadline
    """True once no turn is queued or running and nothing waits on the user; False at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        busy = await Turn.objects.of(instance).active().aexists()
        if not busy and not await has_pending_interaction(instance):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(STABLE_POLL_SECONDS)


async def replace_messages(instance: AgentInstance, messages: list[UIMessage], origin_channel: str) -> None:
    """Client-pushed ``cf_agent_chat_messages`` (``setMessages``): persist, tell the others."""
    merged = await database_sync_to_async(transcript.persist)(instance, messages)
    await fanout.publish(instance.pk, frames.chat_messages(merged), exclude=[origin_channel])


def queued_instances() -> list[int]:
    """Instances with queued turns: the beat task re-drains them in case no process is on it."""
    return list(Turn.objects.queued().values_list("instance_id", flat=True).distinct())


async def recover_interrupted(*, now: datetime | None = None) -> int:
    """Finalise every running turn whose process is gone and run what was queued behind it."""
    turns = await recovery.recover_interrupted(now=now)
    for turn in turns:
        await drain(turn.instance_id)
    return len(turns)


