"""Celery tasks of crash recovery (registered through ``agents_app.tasks``)."""

from typing import Any

from celery import shared_task
from celery.signals import worker_ready

from .. import turns
from ..turns.control import run_sync
from . import service


@shared_task(name="agents_app.recover_interrupted_turns")
def recover_interrupted_turns() -> dict[str, int]:
    """Cut turns whose process died and recover them on this worker (``recovery.service``)."""
    return {"recovered": run_sync(turns.recover_interrupted)}


@worker_ready.connect
def recover_on_start(sender: Any = None, **kwargs: Any) -> None:
    """A worker that starts looks for turns a crash left running (the machine may have rebooted)."""
    recover_interrupted_turns.delay()


@shared_task(name="agents_app.sweep_recovery_incidents")
def sweep_recovery_incidents() -> dict[str, int]:
    """Remove recovery incidents that ended a week ago (``service.sweep_expired``)."""
    return {"deleted": service.sweep_expired()}
