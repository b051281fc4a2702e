"""Django's SQLite backend, with the processes' write transactions handed over through a file lock.

SQLite has one write lock per database. A writer that finds it taken is left to SQLite's busy
handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ms and so on before each new try: when two server
processes both start many turns at once, the one that got the lock first takes it again and
again while the other sleeps, and its turns start only after the other's burst (measured in
bench/README.md, "Fourth round": one process's first admission waited 107 ms). Here every
transaction first takes an exclusive ``flock`` on a file beside the database, which the kernel
hands to a waiting process the moment it is released, and releases it at its commit or rollback.

A write outside a transaction (autocommit: the ORM's ``save()`` of one row, an ``update()``)
takes the lock around its statement too, so every writer of the project waits in turn, and a
unit that holds the lock never meets one in SQLite's busy handler. Other programs writing the
file still meet SQLite's busy handler and its ``timeout``. An in-memory database has no file and
no other process: no lock.

``write_lock_if_free()`` takes the lock only if no other writer holds it, and holds it for a
block of code: the turn engine and the stream buffer run their database work on the event loop's
own thread when that needs no wait (``agents_app.database``). When it is taken, that work waits
for it off the loop (``wait_for_write_lock``, on any thread) and then runs on the loop all the
same, holding it (``holding_write_lock``).

WAL checkpoints (copying the log's pages back into the database file, two ``fsync`` calls) run on a
thread of their own, never in a writer's commit: see ``_Checkpointer``.
"""

import contextlib
import fcntl
import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.request import pathname2url

from django.db.backends.sqlite3 import base

logger = logging.getLogger(__name__)

# Statements that write nothing: an autocommit one takes no lock.
_READS = ("SELECT", "PRAGMA", "EXPLAIN")

# Statement texts converted to SQLite's placeholders, kept per process: a turn runs the same few
# dozen texts every time (``agents_app.statements`` and the ORM's), and Django converts each one
# with a regular expression at every execution, about 10 µs for a 370-character statement
# (bench/README.md, "Fifteenth round"). Texts that vary (``IN`` lists of any length) only cycle
# through the cache's oldest entries; longer ones (a bulk insert's) are converted every time, so
# the cache holds at most about 2 MB.
QMARK_CACHE_SIZE = 512
QMARK_CACHE_MAX_CHARS = 4096


@functools.lru_cache(maxsize=QMARK_CACHE_SIZE)
def _qmark_cached(query: str) -> str:
    return _qmark(query)


def _qmark(query: str) -> str:
    return base.FORMAT_QMARK_REGEX.sub("?", query).replace("%%", "%")


# Seconds from a write to the checkpoint that copies it into the database file; writes meanwhile
# share that checkpoint. A checkpointer with no write for CHECKPOINTER_IDLE seconds stops its thread.
CHECKPOINT_DELAY = 1.0
CHECKPOINTER_IDLE = 60.0


class _Checkpointer:
    """This process's WAL checkpoints of one database file, on a daemon thread.

    SQLite's automatic checkpoint runs inside the commit that takes the log past 1,000 pages: on a
    server that commit is on the event loop, which then stalls 4 to 6 ms (bench/README.md, "Fifteenth
    round"). The project's connections turn it off (``wal_autocheckpoint=0``) and report each write
    here instead; a ``PASSIVE`` checkpoint at most ``CHECKPOINT_DELAY`` later copies what every
    connection of every process committed, with Python's GIL released, and never waits for a reader
    or a writer (what a reader still uses is copied by a later one). Each process with writers has
    one, so the log is copied back as long as any of them writes.
    """

    _lock = threading.Lock()
    _running: dict[str, "_Checkpointer"] = {}

    def __init__(self, path: str) -> None:
        self._path = path
        self._written = threading.Event()

    @classmethod
    def wrote(cls, path: str) -> None:
        """A connection of this process committed a write to ``path``."""
        running = cls._running.get(path)
        if running is not None and running._written.is_set():
            # A checkpoint is due and not begun: it clears the flag before it copies, so it copies
            # this write too, and a set flag keeps the thread from ending. No lock on the hot path.
            return
        with cls._lock:
            checkpointer = cls._running.get(path)
            if checkpointer is None:
                checkpointer = cls._running[path] = cls(path)
                threading.Thread(target=checkpointer._run, name="sqlite-checkpoint", daemon=True).start()
            checkpointer._written.set()

    def _run(self) -> None:
        while True:
            if not self._written.wait(CHECKPOINTER_IDLE):
                with self._lock:
                    # A write reported under the lock either finds this one gone or set the event.
                    if not self._written.is_set():
                        del self._running[self._path]
                        return
            time.sleep(CHECKPOINT_DELAY)
            self._written.clear()
            self._checkpoint()

    def _checkpoint(self) -> None:
        # A connection of its own for each checkpoint, which never creates the file (``mode=rw``):
        # a database removed meanwhile (a test's, a bench's) has nothing to copy back.
        try:
            connection = sqlite3.connect(f"file:{pathname2url(self._path)}?mode=rw", uri=True, isolation_level=None)
            try:
                connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                connection.close()
        except sqlite3.Error as exc:
            if os.path.exists(self._path):
                logger.warning("SQLite checkpoint of %s failed: %s", self._path, exc)

    @classmethod
    def _forget_after_fork(cls) -> None:
        # A forked child has none of its parent's threads, and maybe a lock held by one of them.
        cls._lock = threading.Lock()
        cls._running = {}


os.register_at_fork(after_in_child=_Checkpointer._forget_after_fork)


class _Cursor(base.SQLiteCursorWrapper):
    """Django's cursor, whose writes outside a transaction hold the write lock for the statement."""

    database: "DatabaseWrapper"

    def execute(self, query: str, params: Any = None) -> Any:
        return self._locked_if_writing(query, super().execute, params)

    def executemany(self, query: str, param_list: Any) -> Any:
        return self._locked_if_writing(query, super().executemany, param_list)

    def _locked_if_writing(self, query: str, run: Callable[[str, Any], Any], params: Any) -> Any:
        database = self.database
        lock = database._autocommit_write_lock(query)
        if lock is None:
            return run(query, params)
        database._take_write_lock(lock)
        try:
            return run(query, params)
        finally:
            database._release_write_lock()

    def convert_query(self, query: str, *, param_names: list[str] | None = None) -> str:
        """Django's conversion, its "format" style (every statement of the project's) from the cache."""
        if param_names is None:
            return _qmark_cached(query) if len(query) <= QMARK_CACHE_MAX_CHARS else _qmark(query)
        return super().convert_query(query, param_names=param_names)


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._write_lock: int | None = None
        self._write_lock_held = False
        # Held for a block (``write_lock_if_free``): its transactions' ends leave it held.
        self._write_lock_pinned = False

    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        if not self.is_in_memory_db():
            connection.execute("PRAGMA wal_autocheckpoint=0")  # _Checkpointer does it
        return connection

    def create_cursor(self, name: str | None = None) -> _Cursor:
        cursor = self.connection.cursor(factory=_Cursor)
        cursor.database = self
        return cursor

    def _autocommit_write_lock(self, query: str) -> int | None:
        """The write lock a statement outside a transaction must hold (a write; in a transaction, or
        with the lock held for a block, it is there already), or None."""
        if self.autocommit and not self._write_lock_held and not query.lstrip()[:7].upper().startswith(_READS):
            return self._lock_file()
        return None

    def _lock_file(self) -> int | None:
        if self._write_lock is None and not self.is_in_memory_db():
            self._write_lock = os.open(f"{self.settings_dict['NAME']}-writelock", os.O_RDWR | os.O_CREAT, 0o600)
        return self._write_lock

    @contextlib.contextmanager
    def write_lock_if_free(self) -> Iterator[bool]:
        """Hold the write lock for the block if no other writer (of this process or another) holds
        it now: True, and the block's transactions find it taken; False at once otherwise, or when
        there is no lock to take (an in-memory database) or this connection is in a transaction."""
        lock = None if self.in_atomic_block else self._lock_file()
        if lock is None:
            yield False
            return
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        with self.holding_write_lock():
            yield True

    def write_lock_fd(self) -> int | None:
        """The lock file's descriptor (None: no lock to take, or this connection is in a transaction),
        for ``wait_for_write_lock`` on another thread."""
        return None if self.in_atomic_block else self._lock_file()

    @staticmethod
    def wait_for_write_lock(fd: int) -> None:
        """Block until the lock of ``write_lock_fd`` is this connection's, in turn with the other
        writers; ``holding_write_lock`` then uses and releases it. Only locks the file, so it may
        run on a thread other than the connection's, which must not use the lock meanwhile."""
        fcntl.flock(fd, fcntl.LOCK_EX)

    @staticmethod
    def give_back_write_lock(fd: int) -> None:
        """Release what ``wait_for_write_lock`` took when nothing came to use it (any thread)."""
        fcntl.flock(fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def holding_write_lock(self) -> Iterator[None]:
        """The block's transactions run under the write lock this connection has just taken
        (``write_lock_if_free``, ``wait_for_write_lock``), which is released at the block's end."""
        self._write_lock_held = self._write_lock_pinned = True
        try:
            yield
        finally:
            self._write_lock_pinned = False
            if not self.in_atomic_block:
                self._release_write_lock()

    def _take_write_lock(self, lock: int) -> None:
        """Wait for the write lock in turn with the other writers; this connection holds it then."""
        fcntl.flock(lock, fcntl.LOCK_EX)
        self._write_lock_held = True

    def _start_transaction_under_autocommit(self) -> None:
        lock = self._lock_file()
        if lock is not None and not self._write_lock_held:
            self._take_write_lock(lock)
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._release_write_lock()
            raise

    def _release_write_lock(self) -> None:
        if self._write_lock_held and not self._write_lock_pinned and self._write_lock is not None:
            self._write_lock_held = False
            fcntl.flock(self._write_lock, fcntl.LOCK_UN)
            _Checkpointer.wrote(str(self.settings_dict["NAME"]))

    def _commit(self) -> None:
        try:
            super()._commit()
        finally:
            self._release_write_lock()

    def _rollback(self) -> None:
        try:
            super()._rollback()
        finally:
            self._release_write_lock()

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self._release_write_lock()
