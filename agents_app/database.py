"""Where a turn's database work runs: on Channels' database thread, or on the event loop's own.

The units are the engine's two per turn (the admission with the queue's first look, the end of a
turn) and the stream buffer's background row writes (``streaming.buffer``).

Django keeps the ORM off an event loop's thread: a query there blocks every connection the loop
serves, and coroutines sharing the thread's connection would interleave their transactions. So
``run`` sends a unit of work to the database thread (``database_sync_to_async``), except on the
SQLite fast path (``_on_loop_thread``), where neither can happen and the hop would cost more
than the work (docs/decisions.md#sqlite-inline-path): the loop is the process's own (the main
thread's), its connection has an SQLite write lock file (the unit holds the lock from before its
first statement to its end, so it never waits on the loop), and the unit is synchronous (nothing
else uses the connection while its transaction is open). Other turns
running on the loop do not send it to the thread: the GIL lets only one thread run Python at a
time, so a hop gives them nothing, and under load it cost P4 a seventh of its CPU per chunk.

When the write lock is taken (by another process, mostly), the unit waits for it off the loop,
on a helper thread blocked on the lock file in turn with the other processes' writers, and then
runs on the loop all the same, holding it: on the database thread it held the lock through a
wait for the GIL after each SQLite call, while the busy loop kept it (bench/README.md,
"Eleventh round"). One unit of a loop waits at a time; while it does, the loop's next units queue
behind it. A unit whose caller is cancelled runs to its end; one still waiting when the loop
stops runs on the helper thread instead, with that thread's connection, as it would have on the
database thread.

Every write of the project's, in a transaction or not, takes the file lock first
(``thinkproject.sqlite``), so a unit holding it never waits on the loop for another. Only a
program that writes the file without the project's backend could hold a unit in SQLite's busy
handler, on the loop.

On PostgreSQL a unit waits for the database's answers (a dozen round trips a turn), and on the
loop's thread the loop waits with it. It runs there all the same while its turn is the only one
of the loop (a turn's admission when none runs, the end of the last one running): the hops
there and back, and the GIL handed between the threads, took a twentieth to a quarter of a
one-chunk turn (docs/decisions.md#postgresql-units-of-a-lone-turn). Whatever else the loop
serves meanwhile (a relay of another process's reply, a connect) waits as long as the unit, a
wait for a row that another transaction holds included. With other turns running, the unit
hops: they run while it waits.
"""

import asyncio
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django import db
from django.db import DEFAULT_DB_ALIAS, connections

T = TypeVar("T")

logger = logging.getLogger(__name__)

# Per event loop: held by the unit that waits for the write lock (``_after_the_lock``).
_waiting: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock]" = weakref.WeakKeyDictionary()
# Work whose callers stopped waiting for it (``to_the_end``): it runs to its end, as on the database thread.
_orphans: set["asyncio.Task[Any]"] = set()


async def run(unit: Callable[..., T], *args: Any, close_old_connections: bool = True, alone: bool = False) -> T:
    """``unit(*args)``: on the event loop's thread when its connection has a write lock to take
    (module docstring), or on PostgreSQL when the caller is ``alone`` (its turn is the only one
    running on the loop, ``turns.control.turns_here``); else on the database thread, where
    ``close_old_connections`` (Channels' ``database_sync_to_async``) closes a stale connection
    before and after the unit; without it, the hop is asgiref's plain one (the stream buffer's
    background writes, which never had it)."""
    connection = _loop_connection()
    if connection is not None:
        return await _on_loop_thread(connection, unit, args)
    if alone and _postgres_on_the_loop():
        return _on_idle_loop(unit, args)
    hop = database_sync_to_async if close_old_connections else sync_to_async
    return await hop(unit)(*args)


def _postgres_on_the_loop() -> bool:
    """The loop is the process's own (``_main_thread_connection``), its database PostgreSQL, and
    its connection in no transaction."""
    connection = _main_thread_connection()
    return connection is not None and connection.vendor == "postgresql" and not connection.in_atomic_block


def _on_idle_loop(unit: Callable[..., T], args: tuple[Any, ...]) -> T:
    """``unit(*args)`` on this thread with its own connection, checked before and after as a hop
    checks the database thread's (``close_old_connections``)."""
    with _as_the_threads():
        db.close_old_connections()
        try:
            return unit(*args)
        finally:
            db.close_old_connections()


@contextlib.contextmanager
def _as_the_threads() -> Iterator[None]:
    """The block sees no running loop. Django's guard (``SynchronousOnlyOperation``) asks asyncio
    whether a loop runs on this thread; for a unit, none does. Connections are looked up the same
    way: with a loop running, asgiref hands each task a connection of its own; a unit gets the thread's."""
    loop = asyncio.get_running_loop()
    asyncio._set_running_loop(None)
    try:
        yield
    finally:
        asyncio._set_running_loop(loop)


def _main_thread_connection() -> Any | None:
    """The main thread's connection, when the running loop is that thread's. The main thread's
    loop serves the process: one that ``async_to_sync`` starts on a thread for one call (a Celery
    task, a sync view) would leave that thread's connection behind each time."""
    if threading.current_thread() is not threading.main_thread():
        return None
    with _as_the_threads():
        return connections[DEFAULT_DB_ALIAS]


def _loop_connection() -> Any | None:
    """The connection units run on the loop's thread with: the main thread's, when it has an
    SQLite write lock file (``_main_thread_connection``)."""
    connection = _main_thread_connection()
    fd = getattr(connection, "write_lock_fd", None)
    return connection if fd is not None and fd() is not None else None


async def _on_loop_thread(connection: Any, unit: Callable[..., T], args: tuple[Any, ...]) -> T:
    """``unit(*args)`` on this thread: at once if the write lock is free and no unit of the loop
    waits for it, else once it is this connection's (``_after_the_lock``)."""
    loop = asyncio.get_running_loop()
    waiting = _waiting.get(loop)
    if waiting is None:
        waiting = _waiting[loop] = asyncio.Lock()
    if not waiting.locked():
        with _as_the_threads(), connection.write_lock_if_free() as held:
            if held:
                return unit(*args)
    return await to_the_end(asyncio.ensure_future(_after_the_lock(connection, waiting, unit, args)))


async def to_the_end(task: "asyncio.Task[T]") -> T:
    """``task``'s result; a caller cancelled meanwhile leaves it to run to its end, as work handed to
    the database thread does (kept referenced until then, a failure logged, since nobody awaits it)."""
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        _orphans.add(task)
        task.add_done_callback(_forget)
        raise


def _forget(task: "asyncio.Task[Any]") -> None:
    _orphans.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning("Database work whose caller had gone failed: %r", task.exception())


async def _after_the_lock(connection: Any, waiting: asyncio.Lock, unit: Callable[..., T],
                          args: tuple[Any, ...]) -> T:
    """``unit(*args)`` on the loop's thread once this connection holds the write lock."""
    async with waiting:
        with _as_the_threads(), connection.write_lock_if_free() as held:
            if held:
                return unit(*args)
        fd = connection.write_lock_fd()
        if fd is None:  # in a transaction: cannot happen between units, which end theirs
            return await database_sync_to_async(unit)(*args)
        taken = _lock_waiter().submit(connection.wait_for_write_lock, fd)
        try:
            await asyncio.wrap_future(taken)
        except asyncio.CancelledError:
            # The loop is stopping (a caller's cancellation does not reach here: ``shield``). The
            # helper thread may take the lock yet: it gives it back then, and runs the unit after.
            taken.add_done_callback(functools.partial(_give_back, connection, fd))
            _lock_waiter().submit(_run_without_the_loop, unit, args)
            raise
        with _as_the_threads(), connection.holding_write_lock():
            return unit(*args)


@functools.cache
def _lock_waiter() -> ThreadPoolExecutor:
    """The helper thread that waits for the write lock: one is enough, one unit per loop waits."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-write-lock")


def _give_back(connection: Any, fd: int, taken: "Future[None]") -> None:
    if not taken.cancelled() and taken.exception() is None:
        connection.give_back_write_lock(fd)


def _run_without_the_loop(unit: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A unit its stopped loop left waiting, run to its end on the helper thread's own connection."""
    try:
        unit(*args)
    except Exception as exc:  # noqa: BLE001 (no caller to raise it to: logged, as a hop's would be lost)
        logger.warning("A unit of database work left by its stopped event loop failed: %r", exc)
    finally:
        connections.close_all()
