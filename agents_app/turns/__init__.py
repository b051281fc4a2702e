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
from django.db import transaction
from django.db.models import F

from .. import events, registry, transcript
from ..agent import SaveMessagesResult
from ..messages import UIMessage, awaits_interaction, new_message_id, new_request_id, request_message_ids
from ..models import AgentInstance, Turn
from ..protocol import frames
from ..protocol.parse import ChatRequest, ProtocolError
from ..protocol.types import Outcome
from ..streaming import buffer, fanout
from . import admission, control, liveness, recovery
from .engine import drain, start_drain
from .interactions import apply_tool_approval, apply_tool_result, enqueue_continuation

__all__ = [
    "apply_tool_approval", "apply_tool_result", "cancel", "cancel_all", "clear", "drain", "enqueue_continuation",
    "has_pending_interaction", "queued_instances", "recover_interrupted", "replace_messages", "reset_turn_state",
    "save_messages", "start_drain", "submit_chat", "wait_until_stable",
]


async def submit_chat(instance: AgentInstance, request: ChatRequest, origin_channel: str, user: Any = None) -> None:
    """Accept a ``cf_agent_use_chat_request``: store the user's messages and queue the turn, or drop it.

    The agent's ``message_concurrency`` decides (``turns.admission``). Order of frames as the
    reference server (spec §2.4): the other connections see the incoming transcript and again
    the stored one; the reply streams to everyone. A dropped submit is rolled back for the
    sender alone: the transcript as it stands, then a ``skipped`` terminal frame (spec §2.6).

    Raises:
        ProtocolError: the request id already names a turn of this conversation (nothing stored).
    """
    agent = registry.agent_for(instance)
    try:
        admitted = await database_sync_to_async(admission.accept_chat)(
            instance, request, origin_channel, user, agent.message_concurrency, transcript.Policy.of(agent))
    except ProtocolError as exc:
        events.emit_chat(instance, events.REQUEST_FAILED, requestId=request.request_id, stage="persist",
                         messagesPersisted=False, error=str(exc))
        raise
    if admitted.dropped:
        await fanout.publish(instance.pk, frames.chat_messages(admitted.transcript), only=origin_channel)
        await fanout.publish(instance.pk, frames.done(
            request_id=request.request_id, outcome=Outcome.SKIPPED, message_ids=request_message_ids(request.messages),
        ), only=origin_channel)
        return
    await fanout.publish(instance.pk, frames.chat_messages(request.messages), exclude=[origin_channel])
    await fanout.publish(instance.pk, frames.chat_messages(admitted.transcript), exclude=[origin_channel])
    start_drain(instance.pk)


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
    policy = transcript.Policy.of(registry.agent_for(instance))
    turn, merged = await database_sync_to_async(_accept_programmatic)(instance, ui_messages, policy)
    await fanout.publish(instance.pk, frames.chat_messages(merged))
    await drain(instance.pk)
    return await _wait_finished(turn.pk, turn.request_id)


def _accept_programmatic(instance: AgentInstance, messages: list[UIMessage],
                         policy: transcript.Policy) -> tuple[Turn, list[UIMessage]]:
    with transaction.atomic():
        merged = transcript.persist(instance, messages, policy=policy)
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
    events.emit_chat(instance, events.MESSAGE_CANCEL, requestId=request_id)
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
    events.emit_chat(instance, events.MESSAGE_CLEAR)


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
    policy = transcript.Policy.of(registry.agent_for(instance))
    merged = await database_sync_to_async(transcript.persist)(instance, messages, policy=policy)
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


