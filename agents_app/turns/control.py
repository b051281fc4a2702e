"""Reaching a running turn from any process: cancel it, or ask it to flush its stream buffer.

Each process (each event loop) has one control channel on the channel layer, read by one receive
loop that lives as long as the loop: cancelling a channels_redis ``receive()`` can lose a message
it has just popped for another channel of the process, so the loop is never cancelled while the
process serves connections. A claimed turn records ``<channel> <turn pk>`` in ``Turn.worker``, and
requests name the turn they are for.
"""

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from channels.layers import get_channel_layer

from ..abort import AbortSignal

logger = logging.getLogger("agents_app.turns")

CANCEL_EVENT = "turn.cancel"
Handler = Callable[[dict[str, Any]], Awaitable[None]]


class _ProcessControl:
    """The control channel of one event loop, and the turns running on it."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.turns: dict[int, tuple[AbortSignal, Handler]] = {}
        self.task: asyncio.Task[None] | None = None

    async def receive(self) -> None:
        layer = get_channel_layer()
        while True:
            message = await layer.receive(self.channel)
            entry = self.turns.get(message.get("turn", -1))
            if entry is None:
                continue  # the turn has ended: a late cancel or flush request has nothing to do
            signal, on_message = entry
            if message.get("type") == CANCEL_EVENT:
                signal.abort(message.get("reason") or "Cancelled")
            else:
                try:
                    await on_message(message)
                except Exception:  # one bad request must not stop the channel (logged)
                    logger.exception("control message %s failed", message.get("type"))


_controls: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ProcessControl]" = weakref.WeakKeyDictionary()


async def _control() -> _ProcessControl:
    loop = asyncio.get_running_loop()
    control = _controls.get(loop)
    if control is None:
        control = _controls[loop] = _ProcessControl(await get_channel_layer().new_channel())
    if control.task is None:
        control.task = loop.create_task(control.receive())
    return control


async def channel_name() -> str:
    """This process's control channel (recorded on the turns it claims)."""
    return (await _control()).channel


@contextlib.asynccontextmanager
async def listening(turn_pk: int, signal: AbortSignal, on_message: Handler) -> AsyncIterator[None]:
    """While the turn runs: abort ``signal`` on ``turn.cancel``; hand other requests to ``on_message``."""
    control = await _control()
    control.turns[turn_pk] = (signal, on_message)
    try:
        yield
    finally:
        control.turns.pop(turn_pk, None)


async def send(channel: str | None, turn_pk: int, message: dict[str, Any]) -> None:
    """Send a control request to the process running turn ``turn_pk``."""
    if not channel:
        return
    control = _controls.get(asyncio.get_running_loop())
    local = control.turns.get(turn_pk) if control is not None and control.channel == channel else None
    if local is not None and message["type"] == CANCEL_EVENT:
        local[0].abort(message.get("reason") or "Cancelled")
        return
    await get_channel_layer().send(channel, {**message, "turn": turn_pk})


async def cancel_running(channel: str | None, turn_pk: int, reason: str = "Cancelled") -> None:
    """Abort a running turn wherever it runs."""
    await send(channel, turn_pk, {"type": CANCEL_EVENT, "reason": reason})


async def shutdown() -> None:
    """Stop this loop's control receiver (a Celery task's loop ends after one call)."""
    control = _controls.pop(asyncio.get_running_loop(), None)
    if control is not None and control.task is not None:
        control.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await control.task


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
