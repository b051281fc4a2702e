"""``thinkproject.sqlite``: a write transaction holds a file lock beside the database from its
BEGIN to its COMMIT or ROLLBACK, so writers of several processes (here: two connections) take
turns as soon as the lock is free, and an in-memory database takes none."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db.utils import ConnectionHandler


@pytest.fixture(autouse=True)
def own_databases(django_db_blocker: Any) -> Iterator[None]:
    """These tests open their own database files, not the test database."""
    with django_db_blocker.unblock():
        yield


def _connection(name: str):  # type: ignore[no-untyped-def]
    handler = ConnectionHandler({"default": {
        "ENGINE": "thinkproject.sqlite", "NAME": name,
        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
    }})
    return handler["default"]


def _begin(connection) -> None:  # type: ignore[no-untyped-def]
    connection.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)


def _end(connection, *, commit: bool) -> None:  # type: ignore[no-untyped-def]
    connection.commit() if commit else connection.rollback()
    connection.set_autocommit(True)


def test_a_second_writer_waits_for_the_first_to_commit_or_roll_back(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite3")
    first = _connection(path)
    with first.cursor() as cursor:
        cursor.execute("CREATE TABLE t (v INTEGER)")
    order: list[str] = []
    began = threading.Event()

    def other() -> None:  # a connection belongs to the thread that made it
        second = _connection(path)
        _begin(second)
        order.append("second began")
        began.set()
        with second.cursor() as cursor:
            cursor.execute("INSERT INTO t VALUES (2)")
        _end(second, commit=True)
        second.close()

    for commit in (True, False):
        began.clear()
        _begin(first)
        with first.cursor() as cursor:
            cursor.execute("INSERT INTO t VALUES (1)")
        thread = threading.Thread(target=other)
        thread.start()
        # The other writer is blocked on the lock: it cannot begin while this transaction is open.
        assert not began.wait(0.3)
        order.append("first ended")
        _end(first, commit=commit)
        thread.join(timeout=30)
        assert began.is_set()
    assert order == ["first ended", "second began"] * 2
    with first.cursor() as cursor:
        cursor.execute("SELECT v FROM t ORDER BY rowid")
        assert [row[0] for row in cursor.fetchall()] == [1, 2, 2]
    assert (tmp_path / "db.sqlite3-writelock").exists()
    first.close()


def test_a_closed_connection_frees_the_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite3")
    first, second = _connection(path), _connection(path)
    _begin(first)
    first.close()
    _begin(second)
    _end(second, commit=True)
    second.close()


def test_an_in_memory_database_takes_no_lock(tmp_path: Path) -> None:
    connection = _connection(":memory:")
    _begin(connection)
    _end(connection, commit=True)
    assert connection._write_lock is None
    connection.close()


def test_write_lock_if_free_holds_the_lock_for_its_block_or_takes_none(tmp_path: Path) -> None:
    path = str(tmp_path / "db.sqlite3")
    first, second = _connection(path), _connection(path)
    with first.cursor() as cursor:
        cursor.execute("CREATE TABLE t (v INTEGER)")
    with first.write_lock_if_free() as held:
        assert held
        # Two transactions in the block: the first one's commit leaves the lock held.
        for value in (1, 2):
            _begin(first)
            with first.cursor() as cursor:
                cursor.execute("INSERT INTO t VALUES (%s)", [value])
            _end(first, commit=True)
            with second.write_lock_if_free() as other:
                assert not other
    # Free again after the block: another writer takes it at once, and while it holds it, the
    # first connection gets no lock (and has none to give back).
    _begin(second)
    with first.write_lock_if_free() as held:
        assert not held
    _end(second, commit=True)
    with second.write_lock_if_free() as held:
        assert held
    with first.cursor() as cursor:
        cursor.execute("SELECT v FROM t ORDER BY rowid")
        assert [row[0] for row in cursor.fetchall()] == [1, 2]
    first.close()
    second.close()


def test_write_lock_if_free_takes_none_in_memory() -> None:
    memory = _connection(":memory:")
    with memory.write_lock_if_free() as held:
        assert not held
    memory.close()


def test_a_write_outside_a_transaction_waits_for_the_lock_and_a_read_does_not(tmp_path: Path) -> None:
    """An autocommit write takes the file lock for its statement: it waits for a holder that has
    no SQLite transaction open (a unit about to start one), which SQLite alone would not make it do."""
    path = str(tmp_path / "db.sqlite3")
    holder = _connection(path)
    with holder.cursor() as cursor:
        cursor.execute("CREATE TABLE t (v INTEGER)")
    read, wrote = threading.Event(), threading.Event()

    def other() -> None:
        writer = _connection(path)
        with writer.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM t")
            read.set()
            cursor.execute("INSERT INTO t VALUES (1)")
            wrote.set()
        writer.close()

    with holder.write_lock_if_free() as held:
        assert held
        thread = threading.Thread(target=other)
        thread.start()
        assert read.wait(timeout=60)
        assert not wrote.wait(0.3)
    thread.join(timeout=60)
    assert wrote.is_set()
    with holder.write_lock_if_free() as held:  # released after the statement
        assert held
    holder.close()


def test_placeholders_are_converted_as_django_does_and_short_texts_once(tmp_path: Path) -> None:
    from django.db.backends.sqlite3.base import SQLiteCursorWrapper

    from thinkproject.sqlite import base

    connection = _connection(str(tmp_path / "db.sqlite3"))
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE t (v TEXT, w INTEGER)")
        query = "INSERT INTO t (v, w) VALUES (%s || '%%', %s)"
        before = base._qmark_cached.cache_info()
        for value in range(3):
            cursor.execute(query, ["a", value])
        after = base._qmark_cached.cache_info()
        # Converted once, then from the cache; the same text Django's own conversion gives.
        assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)
        assert base._qmark(query) == SQLiteCursorWrapper.convert_query(cursor.cursor, query)
        # Named parameters ("pyformat") are Django's, untouched.
        cursor.execute("INSERT INTO t (v, w) VALUES (%(v)s, %(w)s)", {"v": "b", "w": 9})
        # A text above the cache's bound is converted every time and not kept.
        long_query = "SELECT v FROM t WHERE w = %s" + " " * base.QMARK_CACHE_MAX_CHARS
        cursor.execute(long_query, [9])
        assert cursor.fetchall() == [("b",)]
        assert base._qmark_cached.cache_info().currsize == after.currsize
        cursor.execute("SELECT v, w FROM t ORDER BY w")
        assert cursor.fetchall() == [("a%", 0), ("a%", 1), ("a%", 2), ("b", 9)]
    connection.close()


def test_checkpoints_leave_the_writers_commits_and_reach_the_file(tmp_path: Path) -> None:
    """A commit never runs SQLite's checkpoint (it stalled an event loop for milliseconds); the
    process's checkpoint thread copies every write back into the database file all the same."""
    import shutil
    import sqlite3

    from tests.support.waiting import wait_until

    path = tmp_path / "db.sqlite3"
    connection = _connection(str(path))
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_autocheckpoint")
        assert cursor.fetchone() == (0,)
        cursor.execute("CREATE TABLE t (v TEXT)")
        _begin(connection)
        cursor.executemany("INSERT INTO t VALUES (%s)", [["x" * 1000]] * 2000)  # past 1,000 pages
        _end(connection, commit=True)

    def rows_in_the_file_alone() -> int:
        """The rows a copy of the database file shows without its log."""
        copy = tmp_path / f"copy-{time.monotonic_ns()}.sqlite3"
        shutil.copyfile(path, copy)
        reader = sqlite3.connect(copy)
        try:
            return reader.execute("SELECT COUNT(*) FROM t").fetchone()[0]
        except sqlite3.OperationalError:  # the table itself is not copied back yet
            return 0
        finally:
            reader.close()

    assert wait_until(lambda: rows_in_the_file_alone() == 2000, "the checkpoint thread", timeout=60)
    connection.close()


def test_a_checkpoint_of_a_removed_database_makes_no_file_and_logs_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from thinkproject.sqlite.base import _Checkpointer

    path = tmp_path / "db.sqlite3"
    connection = _connection(str(path))
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE t (v INTEGER)")
    connection.close()
    for name in ("db.sqlite3", "db.sqlite3-wal", "db.sqlite3-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    _Checkpointer(str(path))._checkpoint()
    assert not path.exists()
    assert not [r for r in caplog.records if r.name == "thinkproject.sqlite.base"]
