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
# One claimed occurrence of a schedule: ``schedules.execute`` on a worker.
RUN_SCHEDULE = "agents_app.run_schedule"


async def enqueue(task_name: str, *args: Any) -> None:
    """Queue task ``task_name`` with ``args`` (ids, never objects) for a worker."""
    await enqueue_each(task_name, [args])


async def enqueue_each(task_name: str, args_list: list[tuple[Any, ...]]) -> None:
    """Queue task ``task_name`` once per argument tuple (one hop to a thread for all of them)."""

    def send_all() -> None:
        for args in args_list:
            current_app.send_task(task_name, args=args)

    await sync_to_async(send_all)()
