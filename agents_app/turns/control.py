"""Reaching a running turn from any process: cancel it, or ask it to flush its stream buffer.

A running turn listens on its own channel-layer channel, whose name is recorded in
``Turn.worker`` when the turn is claimed. A turn running in this process is also reached
directly for cancels, without the channel layer.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from channels.layers import get_channel_layer

from ..agent import AbortSignal

CANCEL_EVENT = "turn.cancel"
# Control channel name → abort signal of the turn running in this process.
_local: dict[str, AbortSignal] = {}


@contextlib.asynccontextmanager
async def listening(
    channel: str, signal: AbortSignal, on_message: Callable[[dict[str, Any]], Awaitable[None]]
) -> AsyncIterator[None]:
    """While the turn runs: abort ``signal`` on ``turn.cancel``; hand anything else to ``on_message``."""
    layer = get_channel_layer()
    _local[channel] = signal

    async def receive() -> None:
        while True:
            message = await layer.receive(channel)
            if message.get("type") == CANCEL_EVENT:
                signal.abort(message.get("reason") or "Cancelled")
            else:
                await on_message(message)

    task = asyncio.ensure_future(receive())
    try:
        yield
    finally:
        _local.pop(channel, None)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def cancel_running(channel: str | None, reason: str = "Cancelled") -> None:
    """Abort the turn listening on ``channel``: directly if it runs here, else via the layer."""
    if not channel:
        return
    signal = _local.get(channel)
    if signal is not None:
        signal.abort(reason)
    else:
        await get_channel_layer().send(channel, {"type": CANCEL_EVENT, "reason": reason})
