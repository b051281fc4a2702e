"""One running turn per agent instance, across every process.

The partial unique constraint ``one_running_turn_per_instance`` makes "claim the oldest queued
turn" a single conditional UPDATE: it either wins, or raises ``IntegrityError`` because another
process already runs a turn of that instance (that process drains the queue when it finishes).
"""

from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..models import AgentInstance, Turn
from . import liveness

# Why a queued turn with ``affinity`` to a process that is gone ends without running.
ORPHANED_AFFINITY = "The process that queued this turn stopped before it could run"


@dataclass(frozen=True)
class Claim:
    """The outcome of looking at an instance's queue.

    ``skipped``: a stale turn (``Turn.is_stale``), to report as skipped. ``blocked``: nothing was
    claimed because this turn runs (the caller checks whether its process is still there).
    ``deferred``: the next turn is for another process (``Turn.affinity``), which claims it itself.
    ``failed``: the next turn was for a process that is gone; it ended with an error.
    """

    turn: Turn
    skipped: bool = False
    blocked: bool = False
    deferred: bool = False
    failed: bool = False


def claim_next(instance_id: int, control_channel: str) -> Claim | None:
    """Take the next queued turn of the instance (by priority, then oldest); None when there is none.

    A stale turn (accepted before a clear, or superseded by a newer overlapping submit) is marked
    skipped (``Claim.skipped``); when another turn of the instance runs, returns that one as
    ``Claim.blocked`` and claims nothing.
    """
    # Looked at first without a transaction: on SQLite every transaction takes the database's
    # write lock, which the drain's last look at an empty queue, after each turn, need not wait for.
    if not Turn.objects.of(instance_id).queued().exists():
        return None
    while True:
        with transaction.atomic():
            # The user comes along: the engine hands it to authorize_turn without another query.
            turn = Turn.objects.of(instance_id).queued().select_related("user").order_by("-priority", "id").first()
            if turn is None:
                return None
            if turn.affinity and turn.affinity != liveness.worker_label(control_channel):
                if liveness.affinity_alive(turn):
                    return Claim(turn, deferred=True)
                if Turn.objects.filter(pk=turn.pk).queued().update(
                    status=Turn.Status.ERROR, error=ORPHANED_AFFINITY, finished_at=timezone.now()
                ):
                    return Claim(turn, failed=True)
                continue
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


def finish(turn: Turn, status: str, error: str = "", **also: Any) -> None:
    """Record the end of a running turn, releasing the instance for the next one (and ``also``,
    more columns of the turn, in the same statement)."""
    Turn.objects.filter(pk=turn.pk).update(status=status, error=error, finished_at=timezone.now(), **also)
    turn.status, turn.error = status, error
