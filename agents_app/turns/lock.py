"""One running turn per agent instance, across every process.

The partial unique constraint ``one_running_turn_per_instance`` makes "claim the oldest queued
turn" a single conditional UPDATE: it either wins, or raises ``IntegrityError`` because another
process already runs a turn of that instance (that process drains the queue when it finishes).
"""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..models import AgentInstance, Turn
from . import liveness


@dataclass(frozen=True)
class Claim:
    """The outcome of looking at an instance's queue.

    ``skipped``: a stale turn (``Turn.is_stale``), to report as skipped. ``blocked``: nothing was
    claimed because this turn runs (the caller checks whether its process is still there).
    """

    turn: Turn
    skipped: bool = False
    blocked: bool = False


def claim_next(instance_id: int, control_channel: str) -> Claim | None:
    """Take the oldest queued turn of the instance; None when the queue is empty.

    A stale turn (accepted before a clear, or superseded by a newer overlapping submit) is marked
    skipped (``Claim.skipped``); when another turn of the instance runs, returns that one as
    ``Claim.blocked`` and claims nothing.
    """
    while True:
        with transaction.atomic():
            # The user comes along: the engine hands it to authorize_turn without another query.
            turn = Turn.objects.of(instance_id).queued().select_related("user").first()
            if turn is None:
                return None
            if turn.is_stale(*AgentInstance.objects.queue_state(instance_id)):
                if Turn.objects.filter(pk=turn.pk).queued().update(
                    status=Turn.Status.SKIPPED, finished_at=timezone.now()
                ):
                    turn.status = Turn.Status.SKIPPED
                    return Claim(turn, skipped=True)
                continue
            now, worker = timezone.now(), liveness.worker_label(control_channel)
            try:
                with transaction.atomic():
                    won = Turn.objects.filter(pk=turn.pk).queued().update(
                        status=Turn.Status.RUNNING, started_at=now, worker=worker,
                    )
            except IntegrityError:
                running = Turn.objects.of(instance_id).running().first()
                if running is None:
                    continue  # it finished meanwhile: try again
                return Claim(running, blocked=True)
            if won:
                turn.status, turn.started_at, turn.worker = Turn.Status.RUNNING, now, worker
                return Claim(turn)
            # Another process claimed this row between our read and update: look again.


def finish(turn: Turn, status: str, error: str = "") -> None:
    """Record the end of a running turn, releasing the instance for the next one."""
    Turn.objects.filter(pk=turn.pk).update(status=status, error=error, finished_at=timezone.now())
    turn.status, turn.error = status, error
