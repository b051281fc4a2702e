"""Celery tasks of staff approvals (registered through ``agents_app.tasks``)."""

from typing import Any

from celery import shared_task

from .. import dispatch
from ..turns.control import run_sync
from . import service


@shared_task(name=dispatch.CONCLUDE_DECISION)
def conclude_decision(execution_id: str) -> dict[str, Any]:
    """Write a staff decision's outcome into the conversation and run the model's reaction."""
    return {"execution_id": execution_id, "concluded": run_sync(service.conclude, execution_id)}


@shared_task(name="agents_app.sweep_pending_approvals")
def sweep_pending_approvals() -> dict[str, int]:
    """Expire parked calls older than ``AGENT_ACTION_PENDING_APPROVAL_TTL`` (``service.sweep_expired``)."""
    return {"swept": service.sweep_expired()}
