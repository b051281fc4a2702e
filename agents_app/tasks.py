"""Celery tasks: thin, id-based, each calling one service.

Celery's autodiscovery imports this module; it holds the turn engine's tasks and imports each
feature's own ``tasks`` module so that a worker registers them all. Services enqueue tasks by
name (``agents_app.dispatch``); nothing but Celery imports a tasks module.
"""

from typing import Any

from celery import shared_task
from django.contrib.auth import get_user_model

from . import dispatch, registry, turns
from .actions import ledger
from .approvals import tasks as approval_tasks
from .operations import tasks as operations_tasks
from .recovery import tasks as recovery_tasks
from .schedules import tasks as schedule_tasks
from .streaming import buffer
from .turns.control import run_sync

# Each feature's tasks, registered with Celery by being imported here.
__all__ = ["approval_tasks", "operations_tasks", "recovery_tasks", "schedule_tasks"]


async def _save_messages(slug: str, name: str, texts: list[str] | str, owner_id: int | None) -> dict[str, Any]:
    owner = None if owner_id is None else await get_user_model()._default_manager.aget(pk=owner_id)
    agent = await registry.get_agent_class(slug).aget(name, owner=owner)
    result = await agent.save_messages([texts] if isinstance(texts, str) else list(texts))
    return {"request_id": result.request_id, "status": result.status, "error": result.error}


@shared_task(name="agents_app.save_messages")
def save_messages(slug: str, name: str, texts: list[str] | str, owner_id: int | None = None) -> dict[str, Any]:
    """Run a programmatic turn on ``slug/name`` with user messages ``texts`` (one text: one message).

    The instance is user ``owner_id``'s, or with None one of the global namespace (``aget``).
    """
    return run_sync(_save_messages, slug, name, texts, owner_id)


@shared_task(name=dispatch.DRAIN_INSTANCE)
def drain_instance(instance_id: int) -> dict[str, int]:
    """Run the queued turns of one instance here: a message sent over HTTP (``conversations.send_message``),
    a recovery attempt (``turns.run_recovery``), and whatever waits behind them."""
    run_sync(turns.drain, instance_id)
    return {"instance": instance_id}


@shared_task(name="agents_app.drain_stalled_instances")
def drain_stalled_instances() -> dict[str, int]:
    """Run queued turns that no process is running (their submitter exited before draining)."""
    instance_ids = turns.queued_instances()
    for instance_id in instance_ids:
        run_sync(turns.drain, instance_id)
    return {"instances": len(instance_ids)}


@shared_task(name="agents_app.sweep_stream_buffers")
def sweep_stream_buffers() -> dict[str, int]:
    """Remove finished stream buffers past retention and abandoned ones (``streaming.buffer``)."""
    return {"deleted": buffer.sweep_expired()}


@shared_task(name="agents_app.sweep_action_ledger")
def sweep_action_ledger() -> dict[str, int]:
    """Remove action-ledger rows past ``AGENT_ACTION_LEDGER_RETENTION`` (``ledger.sweep_expired``)."""
    return ledger.sweep_expired()
