"""Handing work to a Celery worker, by task name.

Services never import ``agents_app.tasks``: the tasks are adapters above every service, and a
service that imported them would tie the layers in a knot. They name the task instead (the
names are explicit in ``tasks.py``: ``agents_app.<verb>``), and Celery finds it on the worker.
"""

from typing import Any

from asgiref.sync import sync_to_async
from celery import current_app

# The turn that follows a staff decision: ``approvals.conclude`` on a worker.
CONCLUDE_DECISION = "agents_app.conclude_decision"
# Run an instance's queued turns on a worker (a recovery attempt, ``turns.run_recovery``).
DRAIN_INSTANCE = "agents_app.drain_instance"


async def enqueue(task_name: str, *args: Any) -> None:
    """Queue task ``task_name`` with ``args`` (ids, never objects) for a worker."""
    await sync_to_async(current_app.send_task)(task_name, args=args)
