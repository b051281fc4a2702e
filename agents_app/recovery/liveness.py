"""Is the process running a turn still there? Workers, heartbeats and the control address.

A claimed turn records ``<host>:<pid> <control channel>`` in ``Turn.worker`` and refreshes
``heartbeat_at`` while it runs. A running turn is *alive* while its process exists (checked
directly when it runs on this host) and its heartbeat is fresh; otherwise its process died and
recovery may finalise it.
"""

import os
import socket
from datetime import datetime, timedelta

from django.utils import timezone

from ..models import Turn

# This process, as recorded on the turns it claims.
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
# A running turn refreshes its heartbeat this often; three missed beats mean its process is gone.
HEARTBEAT_SECONDS = 5.0
HEARTBEAT_STALE = timedelta(seconds=3 * HEARTBEAT_SECONDS)


def worker_label(control_channel: str) -> str:
    """What a turn claimed by this process records in ``Turn.worker``."""
    return f"{WORKER_ID} {control_channel}"


def control_channel(turn: Turn) -> str | None:
    """The channel the process running ``turn`` listens on for cancel and flush requests."""
    _, _, channel = turn.worker.partition(" ")
    return channel or None


def heartbeat(turn_pk: int) -> bool:
    """Refresh a running turn's heartbeat; False when it is no longer running: another process
    judged it dead (a heartbeat held up past ``HEARTBEAT_STALE``) and cut it into recovery."""
    return bool(Turn.objects.filter(pk=turn_pk).running().update(heartbeat_at=timezone.now()))


def heartbeat_waiting(turn_pk: int) -> None:
    """The process a queued turn has ``affinity`` to is still there, waiting for it."""
    Turn.objects.filter(pk=turn_pk).queued().update(heartbeat_at=timezone.now())


def affinity_alive(turn: Turn, now: datetime | None = None) -> bool:
    """Whether the process a queued turn has ``affinity`` to is still there (it beats while it waits)."""
    if not process_exists(turn.affinity):
        return False
    beat = turn.heartbeat_at or turn.created_at
    return beat is None or beat >= (now or timezone.now()) - HEARTBEAT_STALE


def is_alive(turn: Turn, now: datetime | None = None) -> bool:
    """Whether ``turn`` is running on a process that is still there (False once it has finished)."""
    if turn.status != Turn.Status.RUNNING or not process_exists(turn.worker):
        return False
    beat = turn.heartbeat_at or turn.started_at
    return beat is None or beat >= (now or timezone.now()) - HEARTBEAT_STALE


def process_exists(worker: str) -> bool:
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
