"""Reaching a turn from any process: cancel it, or have it flush its stream buffer.

Each process (each event loop) has one control channel, read by one receive loop that is never
cancelled while the process serves connections: cancelling a channels_redis ``receive()`` can lose
a message it had just popped for another channel (docs/architecture.md#turn-control). A claimed
turn records its process's channel (``liveness``). ``turn.cancel`` aborts the turn's signal;
``stream.flush`` (a reader about to replay) makes the turn's writer store every chunk sent so far
and answer with the last one's index. ``cancel`` marks the turn cancelled in the database (a
queued one ends before it starts), then sends ``turn.cancel``.
"""

import asyncio
import collections
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from .. import events
from ..abort import AbortSignal
from ..mcp import connections as mcp_connections
from ..models import AgentInstance, Turn
from ..recovery import liveness
from ..streaming.buffer import StreamWriter
from ..streaming.handshake import FLUSH_REQUEST, FLUSHED

T = TypeVar("T")

logger = logging.getLogger("agents_app.turns")

CANCEL_EVENT = "turn.cancel"


@dataclass
class _Running:
    """What the control channel can reach of a turn running on this loop."""

    signal: AbortSignal
    # Set once the turn's stream buffer is open (a flush before that has nothing to store).
    writer: StreamWriter | None = None
    # The task running the turn, which a process shutting down cancels (``stop_here``).
    task: "asyncio.Task[Any] | None" = None


# Cancels kept for turns not (or no longer) listening on this process, most recent last.
EARLY_CANCELS_KEPT = 1024


class _ProcessControl:
    """The control channel of one event loop, and the turns running on it."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.turns: dict[int, _Running] = {}
        self.task: asyncio.Task[None] | None = None
        # A turn is claimed, and reads its cancel flag, in the hop before it starts listening: a
        # cancel that reaches this process in between waits here for it (``listening``). A late
        # cancel for a turn that has ended waits here too, until newer ones push it out.
        self.early_cancels: collections.OrderedDict[int, str] = collections.OrderedDict()
        # Flush requests being answered (a reference each, so none is collected mid-way).
        self.flushing: set[asyncio.Task[None]] = set()

    def keep_cancel(self, turn_pk: int, reason: str) -> None:
        self.early_cancels[turn_pk] = reason
        self.early_cancels.move_to_end(turn_pk)
        while len(self.early_cancels) > EARLY_CANCELS_KEPT:
            self.early_cancels.popitem(last=False)

    async def receive(self) -> None:
        layer = get_channel_layer()
        while True:
            message = await layer.receive(self.channel)
            running = self.turns.get(message.get("turn", -1))
            if running is None:
                if message.get("type") == CANCEL_EVENT and isinstance(message.get("turn"), int):
                    self.keep_cancel(message["turn"], message.get("reason") or "Cancelled")
                continue  # a flush request for a turn that is not running has nothing to do
            if message.get("type") == CANCEL_EVENT:
                running.signal.abort(message.get("reason") or "Cancelled")
            elif message.get("type") == FLUSH_REQUEST and running.writer is not None:
                # Answered in a task of its own: the flushes that come together (a mass reconnect)
                # share one database write (``StreamWriter.flush``) instead of waiting in line.
                task = asyncio.ensure_future(_answer_flush(running.writer, message))
                self.flushing.add(task)
                task.add_done_callback(self.flushing.discard)


async def _answer_flush(writer: StreamWriter, message: dict[str, Any]) -> None:
    try:
        last = await writer.flush()
        await get_channel_layer().send(message["reply_to"], {"type": FLUSHED, "token": message["token"], "seq": last})
    except Exception:  # the reader asks again (logged)
        logger.exception("control message %s failed", message.get("type"))


_controls: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ProcessControl]" = weakref.WeakKeyDictionary()


async def _control() -> _ProcessControl:
    loop = asyncio.get_running_loop()
    control = _controls.get(loop)
    if control is None:
        control = _controls[loop] = _ProcessControl(await get_channel_layer().new_channel())
    if control.task is None:
        control.task = loop.create_task(control.receive())
        control.task.add_done_callback(_receive_ended)
    return control


def _receive_ended(task: "asyncio.Task[None]") -> None:
    """A control loop only ends with its event loop; one that fails leaves this loop's turns deaf to
    cancel and flush requests, so it says so (one line)."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.error("turn control loop stopped: %s: %s", type(exc).__name__, exc)


async def channel_name() -> str:
    """This process's control channel (recorded on the turns it claims)."""
    return (await _control()).channel


def early_cancels() -> "collections.OrderedDict[int, str]":
    """The cancels this event loop keeps for turns not listening here, oldest first (the live
    mapping; empty before the loop's control channel exists). For observation in tests: do not
    change it."""
    control = _controls.get(asyncio.get_running_loop())
    return collections.OrderedDict() if control is None else control.early_cancels


def turns_here() -> int:
    """How many turns run on this event loop now (each is registered while it runs: ``listening``)."""
    control = _controls.get(asyncio.get_running_loop())
    return 0 if control is None else len(control.turns)


class Registration:
    """A turn's entry on its process's control channel, while it runs."""

    def __init__(self, running: _Running) -> None:
        self._running = running

    def serve_flushes(self, writer: StreamWriter) -> None:
        """From now on, flush requests store ``writer``'s chunks."""
        self._running.writer = writer


@contextlib.asynccontextmanager
async def listening(turn_pk: int, signal: AbortSignal) -> AsyncIterator[Registration]:
    """While the turn runs: abort ``signal`` on ``turn.cancel``; answer flush requests."""
    control = await _control()
    running = control.turns[turn_pk] = _Running(signal, task=asyncio.current_task())
    early = control.early_cancels.pop(turn_pk, None)
    if early is not None:
        signal.abort(early)
    try:
        yield Registration(running)
    finally:
        control.turns.pop(turn_pk, None)


async def send(channel: str | None, turn_pk: int, message: dict[str, Any]) -> None:
    """Send a control request to the process running turn ``turn_pk``."""
    if not channel:
        return
    control = _controls.get(asyncio.get_running_loop())
    here = control is not None and control.channel == channel
    if here and message["type"] == CANCEL_EVENT:
        assert control is not None
        local = control.turns.get(turn_pk)
        if local is not None:
            local.signal.abort(message.get("reason") or "Cancelled")
        else:
            control.keep_cancel(turn_pk, message.get("reason") or "Cancelled")
        return
    await get_channel_layer().send(channel, {**message, "turn": turn_pk})


async def cancel_running(channel: str | None, turn_pk: int, reason: str = "Cancelled") -> None:
    """Abort a running turn wherever it runs."""
    await send(channel, turn_pk, {"type": CANCEL_EVENT, "reason": reason})


async def cancel(instance: AgentInstance, request_id: str, reason: str | None = None) -> bool:
    """Cancel a queued or running turn by request id; False when there is no such turn (or it ended).

    Its partial reply is kept. Works wherever the turn runs.
    """
    events.emit_chat(instance, events.MESSAGE_CANCEL, requestId=request_id)
    turn = await database_sync_to_async(_mark_cancel)(instance, request_id)
    if turn is None:
        return False
    if turn.status == Turn.Status.RUNNING:
        await cancel_running(liveness.control_channel(turn), turn.pk, reason or "Cancelled")
    return True


def _mark_cancel(instance: AgentInstance, request_id: str) -> Turn | None:
    active = Turn.objects.of(instance).active().filter(request_id=request_id)
    active.update(cancel_requested=True)
    return active.first()


async def cancel_all(instance: AgentInstance) -> int:
    """Cancel every queued and running turn of the instance; returns how many."""
    request_ids = [rid async for rid in Turn.objects.of(instance).active().values_list("request_id", flat=True)]
    return sum([await cancel(instance, rid) for rid in request_ids])


async def shutdown() -> None:
    """Stop this loop's control receiver and close its MCP connections (a Celery task's loop ends
    after one call)."""
    await mcp_connections.close_loop()
    control = _controls.pop(asyncio.get_running_loop(), None)
    if control is not None:
        # Flush answers still running end with the loop (their readers ask again elsewhere).
        tasks = [*control.flushing, *([control.task] if control.task is not None else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def scoped() -> AsyncIterator[None]:
    """Run a block that may start this loop's receiver, and stop it after unless it was running.

    For engine work on a loop that may end with the call (``async_to_sync`` in a sync view);
    a server's loop keeps the receiver it already had.
    """
    existed = asyncio.get_running_loop() in _controls
    try:
        yield
    finally:
        if not existed:
            await shutdown()


def tasks_here() -> "list[asyncio.Task[Any]]":
    """The tasks running turns on this event loop (a process that shuts down waits for them)."""
    control = _controls.get(asyncio.get_running_loop())
    return [] if control is None else [r.task for r in control.turns.values() if r.task is not None]


async def stop_here() -> list[int]:
    """Stop every turn running on this event loop as its process's death would, for a process that
    shuts down (docs/operations.md#lifespan): each turn's task is cancelled, which ends nothing in
    the database, then its writer stores every chunk it sent. Returns the turns' pks: still running
    in the database, for the caller to cut into recovery."""
    control = _controls.get(asyncio.get_running_loop())
    if control is None:
        return []
    stopped = [(pk, running) for pk, running in control.turns.items() if running.task is not None]
    for _, running in stopped:
        assert running.task is not None
        running.task.cancel()
    await asyncio.gather(*(running.task for _, running in stopped if running.task is not None), return_exceptions=True)
    # Together, so the writers' last rows go in one database write.
    await asyncio.gather(*(running.writer.flush() for _, running in stopped if running.writer is not None))
    return [pk for pk, _ in stopped]


class _ProcessLoop:
    """The event loop a Celery worker process runs all its engine work on, in a thread of its own.

    A loop per task cost every continuation a new loop and thread, new Redis connections, a control
    channel and a channel-layer pump that moved from loop to loop as tasks ended; a worker now
    works as a server does: one loop, its database work in one thread (docs/operations.md#workers).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="agents-worker-loop", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


_one_loop = False
_process_loop: _ProcessLoop | None = None
_process_loop_lock = threading.Lock()


def use_one_loop() -> None:
    """From now on, ``run_sync`` in this process (and in processes forked from it) runs on one
    event loop per process (a Celery worker, from its start)."""
    global _one_loop
    _one_loop = True


def _loop_of_process() -> _ProcessLoop | None:
    """This process's loop when it uses one (made on first use: a forked child makes its own)."""
    global _process_loop
    if not _one_loop:
        return None
    with _process_loop_lock:
        if _process_loop is None or _process_loop.pid != os.getpid():
            _process_loop = _ProcessLoop()
        return _process_loop


def run_sync(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run async engine code from sync code (a Celery task) and wait for its result.

    In a worker (``use_one_loop``) it runs on the process's loop, whose turn-control receiver and
    connections stay for the next call. Elsewhere it runs on a loop that ends with the call, and a
    turn-control receiver the call starts is stopped before the loop closes (``scoped``).
    """
    process_loop = _loop_of_process()
    if process_loop is not None and threading.current_thread() is not process_loop.thread:
        return process_loop.run(_awaited(function, *args))

    async def main() -> T:
        async with scoped():
            return await function(*args)

    return async_to_sync(main)()


async def _awaited(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    return await function(*args)
