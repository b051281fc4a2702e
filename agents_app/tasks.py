"""Celery tasks: thin, id-based, each calling one service.

Services enqueue them by name (``agents_app.dispatch``); nothing but Celery imports this module.
"""

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from celery import shared_task
from celery.signals import worker_ready
from django.contrib.auth import get_user_model

from . import approvals, dispatch, ledger, registry, schedules, turns
from .streaming import buffer
from .turns import control, recovery

T = TypeVar("T")


def run_async(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run async engine code from a (sync) Celery task, on a loop that ends with the call.

    A turn-control receiver the call starts is stopped before the loop closes (``turns.control``).
    """

    async def main() -> T:
        async with control.scoped():
            return await function(*args)

    return async_to_sync(main)()


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
    return run_async(_save_messages, slug, name, texts, owner_id)


@shared_task(name=dispatch.CONCLUDE_DECISION)
def conclude_decision(execution_id: str) -> dict[str, Any]:
    """Write a staff decision's outcome into the conversation and run the model's reaction."""
    return {"execution_id": execution_id, "concluded": run_async(approvals.conclude, execution_id)}


@shared_task(name="agents_app.run_due_schedules")
def run_due_schedules() -> dict[str, int]:
    """Claim the scheduled runs that are due (once, whatever other beat runs it) and queue them."""
    return run_async(schedules.tick)


@shared_task(name=dispatch.RUN_SCHEDULE)
def run_schedule(run_id: int) -> dict[str, Any]:
    """Run one claimed occurrence of a schedule: its turn, or its handler (``schedules.execute``)."""
    return {"run_id": run_id, "status": run_async(schedules.execute, run_id)}


@shared_task(name="agents_app.sync_declared_schedules")
def sync_declared_schedules() -> dict[str, int]:
    """Bring the schedules agents declare in ``get_scheduled_tasks()`` in line with the code."""
    return schedules.sync_declared()


@shared_task(name=dispatch.DRAIN_INSTANCE)
def drain_instance(instance_id: int) -> dict[str, int]:
    """Run the queued turns of one instance here: a message sent over HTTP (``conversations.send_message``),
    a recovery attempt (``turns.run_recovery``), and whatever waits behind them."""
    run_async(turns.drain, instance_id)
    return {"instance": instance_id}


@shared_task(name="agents_app.drain_stalled_instances")
def drain_stalled_instances() -> dict[str, int]:
    """Run queued turns that no process is running (their submitter exited before draining)."""
    instance_ids = turns.queued_instances()
    for instance_id in instance_ids:
        run_async(turns.drain, instance_id)
    return {"instances": len(instance_ids)}


@shared_task(name="agents_app.sweep_stream_buffers")
def sweep_stream_buffers() -> dict[str, int]:
    """Remove finished stream buffers past retention and abandoned ones (``streaming.buffer``)."""
    return {"deleted": buffer.sweep_expired()}


@shared_task(name="agents_app.recover_interrupted_turns")
def recover_interrupted_turns() -> dict[str, int]:
    """Cut turns whose process died and recover them on this worker (``turns.recovery``)."""
    return {"recovered": run_async(turns.recover_interrupted)}


@worker_ready.connect
def recover_on_start(sender: Any = None, **kwargs: Any) -> None:
    """A worker that starts looks for turns a crash left running (the machine may have rebooted)."""
    recover_interrupted_turns.delay()


@shared_task(name="agents_app.sweep_recovery_incidents")
def sweep_recovery_incidents() -> dict[str, int]:
    """Remove recovery incidents that ended a week ago (``turns.recovery.sweep_expired``)."""
    return {"deleted": recovery.sweep_expired()}


@shared_task(name="agents_app.sweep_action_ledger")
def sweep_action_ledger() -> dict[str, int]:
    """Remove action-ledger rows past ``AGENT_ACTION_LEDGER_RETENTION`` (``ledger.sweep_expired``)."""
    return ledger.sweep_expired()


@shared_task(name="agents_app.sweep_pending_approvals")
def sweep_pending_approvals() -> dict[str, int]:
    """Expire parked calls older than ``AGENT_ACTION_PENDING_APPROVAL_TTL`` (``approvals.sweep_expired``)."""
    return {"swept": approvals.sweep_expired()}
