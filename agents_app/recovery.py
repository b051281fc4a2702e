"""Turns whose process died: finalise their stream and partial reply, free their instance.

A reconnecting client (through the resume handshake), the queue claim (a dead process on this
host) and the periodic sweep all end here, and exactly one of them wins each turn: the status
changes are conditional UPDATEs.
"""

import json
from datetime import datetime

from channels.db import database_sync_to_async
from django.db import transaction
from django.utils import timezone

from . import transcript
from .messages import builder_for_reply
from .models import AgentInstance, StreamRecord, Turn
from .protocol import frames
from .streaming import buffer, fanout

INTERRUPTED = "Interrupted: the process running this turn stopped"


def _abort(turn_pk: int) -> None:
    Turn.objects.filter(pk=turn_pk, status=Turn.Status.RUNNING).update(
        status=Turn.Status.ABORTED, error=INTERRUPTED, finished_at=timezone.now()
    )


def interrupt(turn: Turn) -> list[dict] | None:
    """Mark a dead turn aborted and finalise its stream; the new transcript if it changed."""
    with transaction.atomic():
        _abort(turn.pk)
        stream = (
            StreamRecord.objects.filter(turn=turn, status=StreamRecord.Status.STREAMING).select_related("turn").first()
        )
        return _finalize(stream) if stream is not None else None


def _finalize(stream: StreamRecord) -> list[dict] | None:
    """Close a streaming buffer and persist the reply rebuilt from its stored chunks."""
    won = StreamRecord.objects.filter(pk=stream.pk, status=StreamRecord.Status.STREAMING).update(
        status=StreamRecord.Status.COMPLETED, completed_at=timezone.now()
    )
    if not won:
        return None
    instance = AgentInstance.objects.get(pk=stream.instance_id)
    messages = transcript.load(instance)
    builder = builder_for_reply(messages, continuation=stream.continuation, message_id=stream.message_id)
    for _, body in buffer.read(stream):
        builder.apply(json.loads(body))
    if not builder.has_content():
        return None
    turn_messages = stream.turn.message_ids if stream.turn is not None else []
    transcript.save_message(instance, builder.message, after=turn_messages[-1] if turn_messages else None)
    return transcript.load(instance)


def _finalize_stream(stream_pk: int) -> tuple[int, list[dict] | None]:
    with transaction.atomic():
        stream = StreamRecord.objects.select_related("turn").get(pk=stream_pk)
        if stream.turn is not None:
            _abort(stream.turn.pk)
        return stream.instance_id, _finalize(stream)


async def finalize_orphan(stream_pk: int) -> None:
    """Finalise an orphaned stream, tell every connection, and run what was queued behind it."""
    from .turns import start_drain

    instance_pk, messages = await database_sync_to_async(_finalize_stream)(stream_pk)
    if messages is not None:
        await fanout.publish(instance_pk, frames.chat_messages(messages))
    start_drain(instance_pk)


def _interrupted(now: datetime) -> list[Turn]:
    from .turns.lock import is_orphaned

    running = Turn.objects.filter(status=Turn.Status.RUNNING)
    return [turn for turn in running if is_orphaned(turn, now)]


async def recover(turn: Turn) -> None:
    """Finalise a turn whose process is gone and show every connection the reply it left."""
    messages = await database_sync_to_async(interrupt)(turn)
    if messages is not None:
        await fanout.publish(turn.instance_id, frames.chat_messages(messages))


async def sweep_interrupted(*, now: datetime | None = None) -> int:
    """Finalise every running turn whose process is gone; returns how many."""
    from .turns import drain

    turns = await database_sync_to_async(_interrupted)(now or timezone.now())
    for turn in turns:
        await recover(turn)
        await drain(turn.instance_id)
    return len(turns)
