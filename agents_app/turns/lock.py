"""One running turn per agent instance, across every process.

The partial unique constraint ``one_running_turn_per_instance`` makes "claim the oldest queued
turn" a single conditional UPDATE: it either wins, or raises ``IntegrityError`` because another
process already runs a turn of that instance (that process drains the queue when it finishes).
"""

import os
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..models import AgentInstance, Turn

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Claim:
    """A turn taken off the queue: to run, or to report as skipped (accepted before a clear)."""

    turn: Turn
    skipped: bool


def claim_next(instance_id: int, control_channel: str) -> Claim | None:
    """Take the oldest queued turn of the instance, or None if there is none or one is running."""
    while True:
        with transaction.atomic():
            # The user comes along: the engine hands it to authorize_turn without another query.
            queued = Turn.objects.filter(instance_id=instance_id, status=Turn.Status.QUEUED)
            turn = queued.select_related("user").first()
            if turn is None:
                return None
            generation = AgentInstance.objects.values_list("generation", flat=True).get(pk=instance_id)
            if turn.generation < generation:
                if Turn.objects.filter(pk=turn.pk, status=Turn.Status.QUEUED).update(
                    status=Turn.Status.SKIPPED, finished_at=timezone.now()
                ):
                    turn.status = Turn.Status.SKIPPED
                    return Claim(turn, skipped=True)
                continue
            now = timezone.now()
            try:
                with transaction.atomic():
                    won = Turn.objects.filter(pk=turn.pk, status=Turn.Status.QUEUED).update(
                        status=Turn.Status.RUNNING, started_at=now,
                        worker=f"{WORKER_ID} {control_channel}",
                    )
            except IntegrityError:
                # Another turn runs. If its process died on this host, free the instance.
                if release_dead(instance_id):
                    continue
                return None
            if won:
                turn.status, turn.started_at = Turn.Status.RUNNING, now
                turn.worker = f"{WORKER_ID} {control_channel}"
                return Claim(turn, skipped=False)
            # Another process claimed this row between our read and update: look again.


# A running turn refreshes its heartbeat this often; three missed beats mean it was orphaned.
HEARTBEAT_SECONDS = 5.0
HEARTBEAT_STALE = timedelta(seconds=3 * HEARTBEAT_SECONDS)


def is_orphaned(turn: Turn, now: datetime | None = None) -> bool:
    """A turn whose process is gone: not running any more, dead on this host, or silent too long."""
    if turn.status != Turn.Status.RUNNING:
        return True
    if not _alive(turn.worker):
        return True
    beat = turn.heartbeat_at or turn.started_at
    return beat is not None and beat < (now or timezone.now()) - HEARTBEAT_STALE


def heartbeat(turn_pk: int) -> None:
    Turn.objects.filter(pk=turn_pk, status=Turn.Status.RUNNING).update(heartbeat_at=timezone.now())


def _alive(worker: str) -> bool:
    """False only when ``worker`` is a process on this host that no longer exists."""
    host, _, rest = worker.partition(":")
    pid = rest.split(" ", 1)[0]
    if host != socket.gethostname() or not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def release_dead(instance_id: int) -> bool:
    """Finalise the running turn of a dead local process; True if the instance was freed.

    This keeps one crashed process from locking an instance until the periodic sweep runs.
    """
    from ..recovery import interrupt

    running = Turn.objects.filter(instance_id=instance_id, status=Turn.Status.RUNNING).first()
    if running is None:
        return True
    if _alive(running.worker):
        return False
    interrupt(running)
    return True


def finish(turn: Turn, status: str, error: str = "") -> None:
    """Record the end of a running turn, releasing the instance for the next one."""
    Turn.objects.filter(pk=turn.pk).update(status=status, error=error, finished_at=timezone.now())
    turn.status, turn.error = status, error


def control_channel_of(turn: Turn) -> str | None:
    """The channel the process running ``turn`` listens on for cancel requests."""
    _, _, channel = turn.worker.partition(" ")
    return channel or None
