"""One running turn per agent instance, across every process.

The partial unique constraint ``one_running_turn_per_instance`` makes "claim the oldest queued
turn" one conditional UPDATE: it wins, or raises ``IntegrityError`` because another process runs a
turn of that instance (and drains the queue when it finishes). Every turn is inserted under the
instance row's lock (``for_new_turn``, or the admission's first write), except a recovery attempt,
inserted in the transaction that ends the running turn it recovers (``recovery.schedule``). So a
transaction holding the lock that finds no turn of the instance queued or running knows none can
appear before it commits: an admission then inserts its turn claimed (``admission.accept_chat``).
"""

import functools
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from .. import statements
from ..models import AgentInstance, Turn
from ..recovery import liveness, memory

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
    # write lock, which a look at an empty queue need not wait for.
    # Inside the caller's transaction (an admission's) the lock is held already: one look is enough.
    if not statements.connection_for(Turn).in_atomic_block and queue_empty(instance_id):
        return None
    while True:
        # No savepoint inside a caller's transaction: an error fails that too (the claim's own
        # UPDATE keeps its savepoint below, to look again after losing a race).
        with transaction.atomic(savepoint=False):
            head = _queued_head(instance_id)
            if head is None:
                return None
            turn, generation, overlap_sequence = head
            still_queued = {"pk": turn.pk, "status": Turn.Status.QUEUED}
            if turn.affinity and turn.affinity != liveness.worker_label(control_channel):
                if liveness.affinity_alive(turn):
                    return Claim(turn, deferred=True)
                if statements.update(Turn, still_queued, status=Turn.Status.ERROR, error=ORPHANED_AFFINITY,
                                     finished_at=timezone.now()):
                    return Claim(turn, failed=True)
                continue
            if turn.is_stale(generation, overlap_sequence):
                if statements.update(Turn, still_queued, status=Turn.Status.SKIPPED, finished_at=timezone.now()):
                    turn.status = Turn.Status.SKIPPED
                    return Claim(turn, skipped=True)
                continue
            now, worker = timezone.now(), liveness.worker_label(control_channel)
            try:
                with transaction.atomic():
                    won = statements.update(Turn, still_queued, status=Turn.Status.RUNNING, started_at=now,
                                            worker=worker, memory_watch=memory.watch())
            except IntegrityError:
                running = Turn.objects.of(instance_id).running().first()
                if running is None:
                    continue  # it finished meanwhile: try again
                return Claim(running, blocked=True)
            if won:
                turn.status, turn.started_at, turn.worker = Turn.Status.RUNNING, now, worker
                return Claim(turn)
            # Another process claimed this row between our read and update: look again.


def for_new_turn(instance_id: int) -> int:
    """Take the instance row's lock for the rest of the caller's transaction, which inserts a turn
    (module docstring); the instance's generation, for the new turn."""
    statements.lock_row(AgentInstance, instance_id, "overlap_sequence")
    return AgentInstance.objects.generation_of(instance_id)


def queue_empty(instance_id: int) -> bool:
    """No turn of the instance is queued (as ``claim_next`` would see it outside a transaction)."""
    return _queued_head(instance_id) is None


def finish(turn: Turn, status: str, error: str = "", **also: Any) -> bool:
    """Record the end of a running turn, releasing the instance for the next one (and ``also``,
    more columns of the turn, in the same statement); False, changing nothing, when the turn is no
    longer running: another process judged it dead and cut it into recovery (``recovery.cut``),
    which owns its end from then on."""
    return finish_and_look(turn, status, error, **also) is not None


@dataclass(frozen=True)
class Look:
    """The instance's turns as the end of one of them sees them: the newest turn and its status,
    and whether any turn is queued."""

    newest: int
    status: str
    queued: bool


_NEWER_AND_QUEUED = statements.newer_turn_and_queued(Turn, Turn.Status.QUEUED)


def finish_and_look(turn: Turn, status: str, error: str = "", **also: Any) -> Look | None:
    """``finish``, with the look at the instance's turns read back by the same statement (the
    drain's last look, which the end of a turn makes in its transaction: one statement fewer);
    None, changing nothing, when the turn is no longer running. In a transaction that holds the
    instance row, every turn inserted before the look is in it (module docstring)."""
    row = statements.update_returning(Turn, {"pk": turn.pk, "status": Turn.Status.RUNNING}, _NEWER_AND_QUEUED,
                                      status=status, error=error, finished_at=timezone.now(), **also)
    if row is None:
        return None
    turn.status, turn.error = status, error
    newer, newer_status, queued = row
    if newer is None:
        return Look(turn.pk, status, queued is not None)
    return Look(int(newer), newer_status, queued is not None)


_TURN = statements.Columns(Turn, "t")


@functools.cache
def _head() -> statements.Select:
    """The hottest read of the engine (twice per turn): the user model is known once apps are loaded."""
    return statements.queued_head(_TURN, _user(), AgentInstance, Turn.Status.QUEUED)


@functools.cache
def _user() -> statements.Columns:
    return statements.Columns(get_user_model(), "u")


def _queued_head(instance_id: int) -> tuple[Turn, int, int] | None:
    """The instance's next queued turn (by priority, then oldest) with its user, and the
    instance's (generation, overlap sequence) that ``Turn.is_stale`` compares it with.
    """
    head = _head()
    row = head.row(instance_id)
    if row is None:
        return None
    connection = head.connection
    turn = _TURN.instance(row, 0, connection)
    assert isinstance(turn, Turn)
    # The user comes along, as select_related leaves it: authorize_turn gets it without a query.
    turn.user = _user().instance(row, len(_TURN), connection)
    return turn, int(row[-2]), int(row[-1])
