"""Where a turn's database work runs: on Channels' database thread, or on the event loop's own.

The units are the engine's two per turn (the admission with the queue's first look, the end of a
turn) and the stream buffer's background row writes (``streaming.buffer``).

Django keeps the ORM off an event loop's thread: a query there blocks every connection the loop
serves, and coroutines sharing the thread's connection would interleave their transactions. So
``run`` sends a unit of work to the database thread (``database_sync_to_async``), except on the
SQLite fast path (``_on_loop_thread``), where neither can happen and the hop would cost more
than the work (docs/decisions.md#sqlite-inline-path): the loop is the process's own (the main
thread's), the SQLite write lock is free (the unit takes it without waiting, to its end), and the
unit is synchronous (nothing else uses the connection while its transaction is open). Other turns
running on the loop do not send it to the thread: the GIL lets only one thread run Python at a
time, so a hop gives them nothing, and under load it cost P4 a seventh of its CPU per chunk.

The file lock covers transactions only. A write outside one holds SQLite's own lock without it,
and a unit that meets such a write waits in SQLite's busy handler, on the loop (a few
milliseconds at worst for a one-row write). This process's own periodic writes, the turns'
heartbeats, are therefore written in transactions (``recovery.liveness``); other processes' and
programs' writes outside a transaction are rare on the turn path.
"""

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections

T = TypeVar("T")


async def run(unit: Callable[..., T], *args: Any, close_old_connections: bool = True) -> T:
    """``unit(*args)``: on the SQLite fast path when it applies (module docstring), else on the
    database thread, where ``close_old_connections`` (Channels' ``database_sync_to_async``) closes
    a stale connection before and after the unit; without it, the hop is asgiref's plain one (the
    stream buffer's background writes, which never had it)."""
    ran, result = _on_loop_thread(unit, args)
    if ran:
        return result
    hop = database_sync_to_async if close_old_connections else sync_to_async
    return await hop(unit)(*args)


def _on_loop_thread(unit: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """The SQLite fast path: (True, ``unit(*args)``) run on this thread, the loop's, when the
    unit need not wait for the write lock; (False, None), without running it, otherwise."""
    loop = asyncio.get_running_loop()
    # The main thread's loop serves the process: one that ``async_to_sync`` starts on a thread for
    # one call (a Celery task, a sync view) would leave that thread's connection behind each time.
    if threading.current_thread() is not threading.main_thread():
        return False, None
    # Django's guard (``SynchronousOnlyOperation``) asks asyncio whether a loop runs on this
    # thread; for the unit, none does. The connection is looked up the same way: with a loop
    # running, asgiref hands each task a connection of its own; the unit's code gets the thread's.
    asyncio._set_running_loop(None)
    try:
        take = getattr(connections[DEFAULT_DB_ALIAS], "write_lock_if_free", None)
        if take is None:
            return False, None
        with take() as held:
            return (True, unit(*args)) if held else (False, None)
    finally:
        asyncio._set_running_loop(loop)
