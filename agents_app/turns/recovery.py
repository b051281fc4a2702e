"""Turns whose process died: finalise their stream and partial reply, free their instance.

A reconnecting client (through the resume handshake), the queue claim (a dead process on this
host), a staff decision meeting a dead turn and the periodic sweep all end here, and exactly one
of them wins each turn: the status changes are conditional UPDATEs. Running what was queued
behind a recovered turn is the caller's business (``turns.drain``).
"""

from datetime import datetime

from channels.db import database_sync_to_async
from django.db import transaction
from django.utils import timezone

from .. import registry, transcript
from ..errors import UnknownAgent
from ..messages import UIMessage
from ..models import AgentInstance, StreamRecord, Turn
from ..protocol import frames
from ..streaming import buffer, fanout
from . import liveness

INTERRUPTED = "Interrupted: the process running this turn stopped"


def _abort(turn_pk: int) -> None:
    Turn.objects.filter(pk=turn_pk).running().update(
        status=Turn.Status.ABORTED, error=INTERRUPTED, finished_at=timezone.now()
    )


def interrupt(turn: Turn) -> list[UIMessage] | None:
    """Mark a dead turn aborted and finalise its stream; the new transcript if it changed."""
    with transaction.atomic():
        _abort(turn.pk)
        stream = (
            StreamRecord.objects.filter(turn=turn, status=StreamRecord.Status.STREAMING).select_related("turn").first()
        )
        return _finalize(stream) if stream is not None else None


def _finalize(stream: StreamRecord) -> list[UIMessage] | None:
    """Close a streaming buffer and persist the reply rebuilt from its stored chunks."""
    won = StreamRecord.objects.filter(pk=stream.pk, status=StreamRecord.Status.STREAMING).update(
        status=StreamRecord.Status.COMPLETED, completed_at=timezone.now()
    )
    if not won:
        return None
    instance = AgentInstance.objects.get(pk=stream.instance_id)
    builder = buffer.partial_reply(stream, transcript.load(instance))
    if not builder.has_content():
        return None
    turn_messages = stream.turn.message_ids if stream.turn is not None else []
    transcript.save_message(instance, builder.message, after=turn_messages[-1] if turn_messages else None,
                            policy=_policy(instance))
    return transcript.load(instance)


def _policy(instance: AgentInstance) -> transcript.Policy:
    try:
        return transcript.Policy.of(registry.agent_for(instance))
    except UnknownAgent:  # its class left AGENT_CLASSES: store the reply as the built-ins prepare it
        return transcript.DEFAULT_POLICY


def _finalize_stream(stream_pk: int) -> tuple[int, list[UIMessage] | None]:
    with transaction.atomic():
        stream = StreamRecord.objects.select_related("turn").get(pk=stream_pk)
        if stream.turn is not None:
            _abort(stream.turn.pk)
        return stream.instance_id, _finalize(stream)


async def finalize_orphan(stream_pk: int) -> int:
    """Finalise an orphaned stream and show every connection the reply it left; its instance's pk."""
    instance_pk, messages = await database_sync_to_async(_finalize_stream)(stream_pk)
    if messages is not None:
        await fanout.publish(instance_pk, frames.chat_messages(messages))
    return instance_pk


async def recover(turn: Turn) -> None:
    """Finalise a turn whose process is gone and show every connection the reply it left."""
    messages = await database_sync_to_async(interrupt)(turn)
    if messages is not None:
        await fanout.publish(turn.instance_id, frames.chat_messages(messages))


def interrupted(now: datetime) -> list[Turn]:
    """Running turns whose process is gone."""
    return [turn for turn in Turn.objects.running() if not liveness.is_alive(turn, now)]


async def recover_interrupted(*, now: datetime | None = None) -> list[Turn]:
    """Finalise every running turn whose process is gone; returns them."""
    turns = await database_sync_to_async(interrupted)(now or timezone.now())
    for turn in turns:
        await recover(turn)
    return turns
