"""Celery tasks of scheduled prompts (registered through ``agents_app.tasks``)."""

from typing import Any

from celery import shared_task

from .. import dispatch
from ..turns.control import run_sync
from . import declared, runs


@shared_task(name="agents_app.run_due_schedules")
def run_due_schedules() -> dict[str, int]:
    """Claim the scheduled runs that are due (once, whatever other beat runs it) and queue them."""
    return run_sync(runs.tick)


@shared_task(name=dispatch.RUN_SCHEDULE)
def run_schedule(run_id: int) -> dict[str, Any]:
    """Run one claimed occurrence of a schedule: its turn, or its handler (``runs.execute``)."""
    return {"run_id": run_id, "status": run_sync(runs.execute, run_id)}


@shared_task(name="agents_app.sync_declared_schedules")
def sync_declared_schedules() -> dict[str, int]:
    """Bring the schedules agents declare in ``get_scheduled_tasks()`` in line with the code."""
    return declared.sync_declared()
