"""Where a turn's database work runs: on Channels' database thread, or on the event loop's own.

Django keeps the ORM off an event loop's thread, for two reasons: a query there blocks every
connection the loop serves, and coroutines sharing the thread's connection would interleave their
transactions. So the engine sends its database work to Channels' database thread
(``database_sync_to_async``). That costs more than the work for a short turn: a thread hop takes
about 80 µs, and while the unit runs, the two threads hand Python's GIL to each other around
every SQLite call (76 futex calls per one-chunk turn; ``bench/README.md``, "Seventh round").

``run(unit, ...)`` runs a unit of the engine's database work on the loop's thread instead when
all of this holds, which answers both reasons:

* **The loop serves the process.** It runs on the main thread, as Daphne's and uvicorn's do, for
  the life of the process. A loop that ``async_to_sync`` starts on a thread of its own for one
  call (a Celery task, a sync view) would leave that thread's connection behind with each call.
* **Nothing waits on the loop.** No other turn runs on it (``control.turns_here``); and the database
  is an SQLite file, whose statements are function calls of microseconds (not round trips to a
  server), whose write lock (``thinkproject.sqlite``'s ``write_lock_if_free``) no other writer
  holds, of this process or another: the unit takes it without waiting and holds it to its end.
* **Nothing shares the connection mid-transaction.** A unit is a synchronous function: it runs
  from its first statement to its commit with no ``await`` in between, so no other coroutine
  can use the loop thread's connection while a transaction of it is open.

Otherwise it hops, as before. The unit is the same function either way; Django's guard against
the ORM on a loop's thread (``SynchronousOnlyOperation``) is told that the loop is not running
for the unit's duration, which is what the conditions above make true of it.
"""

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.db import DEFAULT_DB_ALIAS, connections

from . import control

T = TypeVar("T")


async def run(unit: Callable[..., T], *args: Any, own_turns: int = 0) -> T:
    """``unit(*args)``: on this loop's thread when that waits for nothing (module docstring), else
    on the database thread. ``own_turns``: how many of the loop's running turns are the caller's
    (the end of a turn counts itself)."""
    loop = asyncio.get_running_loop()
    if control.turns_here() <= own_turns and threading.current_thread() is threading.main_thread():
        ran, result = _run_here(loop, unit, args)
        if ran:
            return result
    return await database_sync_to_async(unit)(*args)


def _run_here(loop: asyncio.AbstractEventLoop, unit: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """(True, ``unit(*args)``) if the write lock was free; (False, None) without running it otherwise."""
    # Django's guard asks asyncio whether a loop runs on this thread; for the unit, none does.
    # The connection is looked up the same way: with a loop running, asgiref hands each task a
    # connection of its own; the unit's code, which sees none, gets the thread's.
    asyncio._set_running_loop(None)
    try:
        take = getattr(connections[DEFAULT_DB_ALIAS], "write_lock_if_free", None)
        if take is None:
            return False, None
        with take() as held:
            return (True, unit(*args)) if held else (False, None)
    finally:
        asyncio._set_running_loop(loop)
