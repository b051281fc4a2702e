"""Celery tasks: thin, id-based, each calling one service."""

from typing import Any

from asgiref.sync import async_to_sync
from celery import shared_task

from . import recovery, registry, turns
from .streaming import buffer


@shared_task(name="agents_app.save_messages")
def save_messages(slug: str, name: str, texts: list[str]) -> dict[str, Any]:
    """Run a programmatic turn on ``slug/name`` with user messages ``texts`` (scheduled prompts)."""
    agent_class = registry.get_agent_class(slug)
    agent = async_to_sync(agent_class.aget)(name)
    result = async_to_sync(agent.save_messages)(list(texts))
    return {"request_id": result.request_id, "status": result.status, "error": result.error}


@shared_task(name="agents_app.drain_stalled_instances")
def drain_stalled_instances() -> dict[str, int]:
    """Run queued turns that no process is running (their submitter exited before draining)."""
    instance_ids = turns.queued_instances()
    for instance_id in instance_ids:
        async_to_sync(turns.drain)(instance_id)
    return {"instances": len(instance_ids)}


@shared_task(name="agents_app.sweep_stream_buffers")
def sweep_stream_buffers() -> dict[str, int]:
    """Remove finished stream buffers past retention and abandoned ones (``streaming.buffer``)."""
    return {"deleted": buffer.sweep_expired()}


@shared_task(name="agents_app.recover_interrupted_turns")
def recover_interrupted_turns() -> dict[str, int]:
    """Finalise turns whose process died, and run what was queued behind them (``recovery``)."""
    return {"recovered": async_to_sync(recovery.sweep_interrupted)()}
