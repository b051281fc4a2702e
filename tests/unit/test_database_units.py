"""``agents_app.database.run``: a unit of the engine's database work runs on the event loop's
own thread when the loop is the main thread's and its connection has an SQLite file's write lock
to take (whatever other turns run on the loop; when the lock is taken, once a helper thread has
waited for it), and on Channels' database thread otherwise.

The connections are real ones to an SQLite file (the test database is in memory, which has no
write lock to take, so the engine's units always hop there).
"""

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS
from django.db.utils import ConnectionHandler

from agents_app import database
from agents_app.abort import AbortSignal
from agents_app.turns import control


def _handler(path: str) -> ConnectionHandler:
    return ConnectionHandler({DEFAULT_DB_ALIAS: {
        "ENGINE": "thinkproject.sqlite", "NAME": path,
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
    }})


@pytest.fixture
def file_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, django_db_blocker: Any
                  ) -> Iterator[ConnectionHandler]:
    """The module's connections, to an SQLite file of this test's own."""
    handler = _handler(str(tmp_path / "db.sqlite3"))
    monkeypatch.setattr(database, "connections", handler)
    with django_db_blocker.unblock():
        yield handler


def _insert(handler: ConnectionHandler, value: int) -> int:
    """A unit: a write transaction on the connection the unit's thread gets; returns that thread."""
    connection = handler[DEFAULT_DB_ALIAS]
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE IF NOT EXISTS t (v INTEGER)")
    connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO t VALUES (%s)", [value])
    connection.commit()
    connection.set_autocommit(True)
    return threading.get_ident()


async def test_a_unit_runs_on_the_loop_thread_when_the_lock_is_free(file_database: ConnectionHandler) -> None:
    loop_thread = threading.get_ident()
    assert await database.run(_insert, file_database, 1) == loop_thread
    async with control.listening(1, AbortSignal()):  # as the end of a turn runs
        assert await database.run(_insert, file_database, 2) == loop_thread


async def test_a_unit_runs_on_the_loop_thread_while_other_turns_run_there(file_database: ConnectionHandler) -> None:
    """A hop would not let the other turns run meanwhile (the GIL), and costs CPU (the module's docstring)."""
    loop_thread = threading.get_ident()
    other_turns_may_end = asyncio.Event()
    listening = asyncio.Event()

    async def other_turn(pk: int) -> None:
        async with control.listening(pk, AbortSignal()):
            listening.set()
            await other_turns_may_end.wait()

    tasks = [asyncio.ensure_future(other_turn(pk)) for pk in (1, 2, 3)]
    await listening.wait()
    assert await database.run(_insert, file_database, 1) == loop_thread
    other_turns_may_end.set()
    await asyncio.gather(*tasks)


class OtherWriter:
    """Another process's write transaction, as far as the lock is concerned: holds the write lock
    from ``start`` until ``release``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.holding, self._release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._write)

    def _write(self) -> None:
        connection = _handler(self.path)[DEFAULT_DB_ALIAS]
        connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)
        self.holding.set()
        self._release.wait(timeout=60)
        connection.commit()
        connection.close()

    def start(self) -> "OtherWriter":
        self.thread.start()
        assert self.holding.wait(timeout=60)
        return self

    def release(self) -> None:
        self._release.set()
        self.thread.join(timeout=60)


def _lock_is_free(path: str) -> bool:
    connection = _handler(path)[DEFAULT_DB_ALIAS]
    try:
        with connection.write_lock_if_free() as held:
            return held
    finally:
        connection.close()


def _count(path: str) -> int:
    connection = _handler(path)[DEFAULT_DB_ALIAS]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM t")
            return int(cursor.fetchone()[0])
    finally:
        connection.close()


async def test_units_wait_for_a_taken_lock_off_the_loop_then_run_on_it_in_turn(
        tmp_path: Path, file_database: ConnectionHandler) -> None:
    path = str(tmp_path / "db.sqlite3")
    loop_thread = threading.get_ident()
    assert await database.run(_insert, file_database, 0) == loop_thread  # the table
    writer = OtherWriter(path).start()
    order: list[int] = []

    async def unit_of(value: int) -> int:
        thread = await database.run(_insert, file_database, value)
        order.append(value)
        return thread

    first, second = asyncio.ensure_future(unit_of(1)), asyncio.ensure_future(unit_of(2))
    # The loop serves other work meanwhile: the units wait on a helper thread.
    served = asyncio.Event()
    asyncio.get_running_loop().call_soon(served.set)
    await served.wait()
    assert not first.done() and not second.done()
    writer.release()
    assert await first == loop_thread and await second == loop_thread
    assert order == [1, 2]
    assert await asyncio.to_thread(_count, path) == 3
    assert await asyncio.to_thread(_lock_is_free, path)  # released at each unit's end


async def test_a_unit_whose_caller_is_cancelled_while_it_waits_still_runs_and_frees_the_lock(
        tmp_path: Path, file_database: ConnectionHandler) -> None:
    """As on the database thread, which cannot be stopped either: the unit runs to its end."""
    path = str(tmp_path / "db.sqlite3")
    await database.run(_insert, file_database, 0)
    writer = OtherWriter(path).start()
    caller = asyncio.ensure_future(database.run(_insert, file_database, 1))
    served = asyncio.Event()
    asyncio.get_running_loop().call_soon(served.set)
    await served.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    writer.release()
    # The orphaned unit runs once the loop gets to it; a later unit queues behind it.
    await database.run(_insert, file_database, 2)
    assert await asyncio.to_thread(_count, path) == 3
    assert await asyncio.to_thread(_lock_is_free, path)


def test_a_unit_waiting_for_the_lock_when_its_loop_stops_runs_on_the_helper_thread(
        tmp_path: Path, file_database: ConnectionHandler) -> None:
    """The helper thread takes the lock after the loop is gone: it gives it back (nothing else
    would release it) and runs the unit to its end, as the database thread would have."""
    path = str(tmp_path / "db.sqlite3")
    asyncio.run(database.run(_insert, file_database, 0))  # the table
    writer = OtherWriter(path).start()

    async def stop_while_it_waits() -> None:
        caller = asyncio.ensure_future(database.run(_insert, file_database, 1))
        served = asyncio.Event()
        asyncio.get_running_loop().call_soon(served.set)
        await served.wait()  # the unit waits on the helper thread; ``asyncio.run`` cancels it on return
        assert not caller.done()

    asyncio.run(stop_while_it_waits())
    writer.release()
    database._lock_waiter().submit(lambda: None).result(timeout=60)  # after the wait and the unit
    assert _count(path) == 2
    assert _lock_is_free(path)


def test_a_unit_hops_from_a_loop_on_a_thread_of_its_own(file_database: ConnectionHandler) -> None:
    """As ``async_to_sync`` runs a Celery task's or a sync view's coroutine: on a thread made for the call."""
    threads: dict[str, int] = {}

    async def call() -> None:
        threads["loop"] = threading.get_ident()
        threads["unit"] = await database.run(_insert, file_database, 1)

    thread = threading.Thread(target=asyncio.run, args=(call(),))
    thread.start()
    thread.join(timeout=60)
    assert threads["unit"] != threads["loop"]
