"""Waits for turns to change: woken by PostgreSQL's ``NOTIFY``, or polling.

Code that waits for turns (a REST ``wait=true``, a programmatic turn's caller, an approval that
lets the parked turn settle, a destroy) looks at the database, pauses, and looks again. On SQLite
a pause is the caller's poll interval. On PostgreSQL a trigger (migration 0014) notifies channel
``agents_app_turns`` with the instance's primary key whenever the status of one of its turns
changes, and a process that has waiters listens on one connection of its own, opened for the
first waiter and closed a minute after the last: a pause ends as soon as a turn of a watched
instance changes, and the caller looks again then.

A notification says "look again", never what changed: the database stays the only record. One can
be lost (the listening connection drops, a pooler in transaction mode hands it to another client),
so a pause still ends after ``FALLBACK_SECONDS``; while the listener is not connected, or has not
been connected since the watch's last look, a pause is the poll interval again. A watch is made
before the caller's first look (``watching``), so a change between a look and the next pause wakes
that pause. docs/architecture.md#waits-for-turns.
"""

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections

from . import conf
from .errors import one_line

logger = logging.getLogger(__name__)

# The trigger's channel (migration 0014 spells it too).
CHANNEL = "agents_app_turns"
# Longest pause while notifications arrive: what a lost one can cost a waiter.
FALLBACK_SECONDS = 1.0
# The listener's connection is closed once no watch has been open for this long.
IDLE_SECONDS = 60.0
# After losing its connection (or failing to open one), the listener tries again this often.
RECONNECT_SECONDS = 1.0
# How often the listener looks up from the connection to see whether it is still needed.
_LOOK_UP_SECONDS = 1.0


class Watch:
    """The instances a waiter watches, and what wakes its pauses (``watching``)."""

    def __init__(self, instance_pks: Iterable[int], listener: "_Listener | None") -> None:
        self.instance_pks = frozenset(instance_pks)
        self._listener = listener
        self._loop = asyncio._get_running_loop()
        # A waiter on a thread waits on the first, one on an event loop on the second.
        self._woken = threading.Event()
        self._awoken = asyncio.Event() if self._loop is not None else None
        # The listener's connection as of the last look (None: not listening then).
        self._armed: int | None = None
        self._arm()

    def pause(self, poll: float, *, at_most: float | None = None) -> None:
        """Until a watched instance's turn changes or ``FALLBACK_SECONDS`` pass, when that can be
        heard; else ``poll`` seconds. Never longer than ``at_most``."""
        assert self._awoken is None, "watching() was entered on an event loop: apause() there"
        seconds = self._seconds(poll, at_most)
        if not self._heard():
            time.sleep(seconds)
        else:
            self._woken.wait(seconds)
        self._woken.clear()
        self._arm()

    async def apause(self, poll: float, *, at_most: float | None = None) -> None:
        """``pause`` for a waiter on an event loop (the one the watch was made on)."""
        assert self._awoken is not None, "watching() was entered outside an event loop"
        seconds = self._seconds(poll, at_most)
        if not self._heard():
            await asyncio.sleep(seconds)
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._awoken.wait()
        self._awoken.clear()
        self._arm()

    def wake(self) -> None:
        """A turn of a watched instance changed (on the listener's thread)."""
        if self._loop is None or self._awoken is None:
            self._woken.set()
            return
        with contextlib.suppress(RuntimeError):  # the waiter's loop has closed
            self._loop.call_soon_threadsafe(self._awoken.set)

    def _seconds(self, poll: float, at_most: float | None) -> float:
        seconds = max(poll, FALLBACK_SECONDS) if self._heard() else poll
        return seconds if at_most is None else max(0.0, min(seconds, at_most))

    def _arm(self) -> None:
        """Before each look: which of the listener's connections listens now (None: none)."""
        listener = self._listener
        self._armed = listener.connection_number if listener is not None and listener.listening else None

    def _heard(self) -> bool:
        """Whether every change since the last look was notified to this process: the listener
        has listened on one connection since then (one made later may have missed some)."""
        listener = self._listener
        return (self._armed is not None and listener is not None and listener.listening
                and listener.connection_number == self._armed)


@contextlib.contextmanager
def watching(instance_pks: Iterable[int]) -> Iterator[Watch]:
    """A ``Watch`` of ``instance_pks`` for the block: enter it before the first look."""
    listener = _listener() if _can_listen() else None
    watch = Watch(instance_pks, listener)
    if listener is None:
        yield watch
        return
    listener.add(watch)
    try:
        yield watch
    finally:
        listener.discard(watch)


def _can_listen() -> bool:
    return bool(conf.get("AGENT_LISTEN_NOTIFY")) and connections[DEFAULT_DB_ALIAS].vendor == "postgresql"


class _Listener:
    """One thread per process, while watches are open: ``LISTEN`` on a connection of its own, and
    each notification wakes the watches of its instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Instance → its open watches (an instance with none has no entry).
        self._watches: dict[int, set[Watch]] = {}
        self._thread: threading.Thread | None = None
        # Counts the connections the listener has listened on; ``listening`` while the last one is up.
        self.connection_number = 0
        self.listening = False
        self._lost_since: float | None = None

    def add(self, watch: Watch) -> None:
        with self._lock:
            for pk in watch.instance_pks:
                self._watches.setdefault(pk, set()).add(watch)
            if self._thread is None:
                # Django's parameters for a connection of the listener's own (psycopg's, not one
                # of Django's: nothing of Django's per-thread connections is made on that thread).
                params = connections[DEFAULT_DB_ALIAS].get_connection_params()
                self._thread = threading.Thread(target=self._run, args=(params,), name="agents-listen", daemon=True)
                self._thread.start()

    def discard(self, watch: Watch) -> None:
        with self._lock:
            for pk in watch.instance_pks:
                watches = self._watches.get(pk)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del self._watches[pk]

    def _run(self, params: dict[str, Any]) -> None:
        try:
            self._listen(params)
        finally:  # a failure of its own: the next watch starts another (``_stop`` has done this)
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
                    self.listening = False

    def _listen(self, params: dict[str, Any]) -> None:
        idle_since: float | None = None
        while True:
            try:
                with psycopg.connect(**params, autocommit=True) as connection:
                    connection.execute(f"LISTEN {CHANNEL}")
                    with self._lock:
                        self.connection_number += 1
                        self.listening = True
                    self._back()
                    while True:
                        for notice in connection.notifies(timeout=_LOOK_UP_SECONDS):
                            self._wake(notice.payload)
                        idle_since = self._idle_since(idle_since)
                        if idle_since is not None and time.monotonic() - idle_since >= IDLE_SECONDS:
                            if self._stop():
                                return
                            idle_since = None
            except psycopg.Error as exc:
                with self._lock:
                    self.listening = False
                self._lost(exc)
                time.sleep(RECONNECT_SECONDS)
                if self._stop():
                    return

    def _wake(self, payload: str) -> None:
        try:
            pk = int(payload)
        except ValueError:
            return
        with self._lock:
            watches = list(self._watches.get(pk, ()))
        for watch in watches:
            watch.wake()

    def _idle_since(self, since: float | None) -> float | None:
        with self._lock:
            if self._watches:
                return None
        return time.monotonic() if since is None else since

    def _stop(self) -> bool:
        """End the thread (its connection closes) unless a watch was opened meanwhile."""
        with self._lock:
            if self._watches:
                return False
            self.listening = False
            self._thread = None
            return True

    def _lost(self, error: BaseException) -> None:
        """One log line when the listener loses PostgreSQL, none for each retry."""
        if self._lost_since is None:
            self._lost_since = time.monotonic()
            logger.warning("Turn waits lost their PostgreSQL listener (%s); waiters poll until it is back",
                           one_line(error))

    def _back(self) -> None:
        if self._lost_since is not None:
            logger.warning("Turn waits have their PostgreSQL listener back after %.1f s",
                           time.monotonic() - self._lost_since)
            self._lost_since = None


_the_listener: _Listener | None = None
_the_listener_lock = threading.Lock()


def _listener() -> _Listener:
    global _the_listener
    with _the_listener_lock:
        if _the_listener is None:
            _the_listener = _Listener()
        return _the_listener


def _forget_after_fork() -> None:
    """A forked child has neither the parent's listening thread nor its waiters."""
    global _the_listener, _the_listener_lock
    _the_listener, _the_listener_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
