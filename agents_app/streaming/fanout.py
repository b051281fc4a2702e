"""Fan-out of frames to the connections of an instance through the channel layer.

Every connection of an instance joins the group ``agent.<instance pk>``. A publisher batches the
frames it is given and sends them as one group event ``chat.frames`` whenever the event loop gets
a chance (or when a batch is full): one Redis round trip carries many chunks, which is what keeps
a fast reply fast across processes. Order is preserved: batches are sent one at a time, in order.

Each item carries its text already encoded (once, not once per connection) and says who must
not get it (``exclude``: channel names) or who alone gets it (``only``).
"""

import asyncio
from collections.abc import Iterable
from typing import Any

from channels.layers import get_channel_layer

from ..protocol.frames import Frame, encode

EVENT_TYPE = "chat.frames"
# Frames per group event before the publisher flushes without waiting.
MAX_BATCH = 64
# After the first batch, frames queue this long (seconds) before going out together: one layer
# round trip per few milliseconds of a fast reply instead of one per chunk.
BATCH_WINDOW = 0.002


def group_name(instance_pk: int) -> str:
    return f"agent.{instance_pk}"


def item(frame: Frame, *, exclude: Iterable[str] = (), only: str | None = None,
         request_id: str | None = None) -> dict[str, Any]:
    """One fan-out item.

    ``rid`` marks live response frames (a socket waiting for its resume ACK skips them) and
    ``seq`` their chunk index (a socket finishing a replay skips those it replayed).
    """
    entry: dict[str, Any] = {"text": encode(frame)}
    if "seq" in frame and not frame.get("replay"):
        entry["seq"] = frame["seq"]
    excluded = [c for c in exclude if c]
    if excluded:
        entry["exclude"] = excluded
    if only:
        entry["only"] = only
    if request_id is not None:
        entry["rid"] = request_id
    return entry


class Publisher:
    """Ordered, batched sender of frames to one instance's group."""

    def __init__(self, instance_pk: int) -> None:
        self.group = group_name(instance_pk)
        self.layer = get_channel_layer()
        self._pending: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._flush_task: asyncio.Task[None] | None = None
        self._sent_any = False

    async def send(self, frame: Frame, **options: Any) -> None:
        """Queue a frame; it leaves with the next batch."""
        await self.send_item(item(frame, **options))

    async def send_item(self, entry: dict[str, Any]) -> None:
        self._pending.append(entry)
        if len(self._pending) >= MAX_BATCH:
            await self.flush()
        elif self._flush_task is None:
            self._flush_task = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        # The first frame leaves at once (time to first chunk); later ones wait a short window to
        # travel together. Items queued while a batch was on its way go out with the next one.
        try:
            if self._sent_any:
                await asyncio.sleep(BATCH_WINDOW)
            while self._pending:
                await self.flush()
        finally:
            self._flush_task = None

    async def flush(self) -> None:
        """Send everything queued so far, after any batch already on its way."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if batch:
                self._sent_any = True
                await self.layer.group_send(self.group, {"type": EVENT_TYPE, "items": batch})

    async def close(self) -> None:
        """Flush and wait for the background flush, so nothing is left behind."""
        await self.flush()
        task = self._flush_task
        if task is not None:
            await task


def event(name: str, **data: Any) -> dict[str, Any]:
    """A control item for the connections themselves (e.g. ``stream-start``), sent as no frame."""
    return {"event": name, **data}


async def publish(instance_pk: int, frame: Frame, **options: Any) -> None:
    """Send one frame right away (outside a streaming turn)."""
    await publish_item(instance_pk, item(frame, **options))


async def publish_item(instance_pk: int, entry: dict[str, Any]) -> None:
    await get_channel_layer().group_send(group_name(instance_pk), {"type": EVENT_TYPE, "items": [entry]})
