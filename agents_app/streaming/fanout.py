"""Fan-out of frames to the connections of an instance through the channel layer.

Every connection of an instance joins the group ``agent.<instance pk>``. A publisher batches the
items it is given and sends them as one group event ``chat.frames`` whenever the event loop gets
a chance (or when a batch is full): one Redis round trip carries many chunks, which is what keeps
a fast reply fast across processes. Order is preserved: batches are sent one at a time, in order.

Channel-layer groups are lossy by design (``group_send`` drops a message for a full channel), so
the layer only delivers fast; the stream buffer is the truth. Each entry is a typed ``Item``
(``streaming.items``) whose sequence numbers let a receiver notice a gap and re-send the missing
chunks from the buffer (``streaming.handshake``).
"""

import asyncio
from typing import Any

from channels.layers import get_channel_layer

from ..protocol.frames import Frame
from .items import Item

EVENT_TYPE = "chat.frames"
# Items per group event before the publisher flushes without waiting.
MAX_BATCH = 64
# After the first batch with a live chunk, items queue this long (seconds) before going out
# together: one fan-out event per 10 ms of a reply instead of one per chunk (a provider's chunks
# come 10 to 50 ms apart). Against 2 ms: 28 % less CPU per paced chunk through the core Redis
# layer, a few % through the project's layer (bench/README.md).
BATCH_WINDOW = 0.010


def group_name(instance_pk: int) -> str:
    """Channel-layer group of an instance's connections (never user-typed text)."""
    return f"agent.{instance_pk}"


class Publisher:
    """Ordered, batched sender of items to one instance's group."""

    def __init__(self, instance_pk: int) -> None:
        self.group = group_name(instance_pk)
        self.layer = get_channel_layer()
        self._pending: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._flush_task: asyncio.Task[None] | None = None
        # The flush task is waiting out the batch window (nothing is on its way).
        self._in_window = False
        # A batch with a live chunk went out: from now on items wait for the window.
        self._chunk_sent = False

    @property
    def flushing(self) -> bool:
        """Whether a flush task is scheduled (waiting out the batch window or sending a batch).
        For observation in tests."""
        return self._flush_task is not None

    async def send(self, frame: Frame, **options: Any) -> None:
        """Queue a frame (``Item.frame`` options); it leaves with the next batch."""
        await self._queue(Item.frame_entry(frame, **options))

    async def send_item(self, item: Item) -> None:
        await self._queue(item.encode())

    async def _queue(self, entry: dict[str, Any]) -> None:
        self._pending.append(entry)
        if len(self._pending) >= MAX_BATCH:
            await self.flush()
        elif self._flush_task is None:
            self._flush_task = asyncio.ensure_future(self._flush_soon())

    async def _flush_soon(self) -> None:
        # Up to the reply's first chunk, items leave at once (time to first chunk: the stream's
        # start event goes out ahead of that chunk, which must not then wait out a window); later
        # ones wait a short window to travel together. Items queued while a batch was on its way
        # go out with the next one.
        try:
            if self._chunk_sent:
                self._in_window = True
                try:
                    await asyncio.sleep(BATCH_WINDOW)
                finally:
                    self._in_window = False
            while self._pending:
                await self.flush()
        finally:
            self._flush_task = None

    async def flush(self) -> None:
        """Send everything queued so far, after any batch already on its way."""
        async with self._lock:
            batch, self._pending = self._pending, []
            if batch:
                live = ["seq" in entry for entry in batch]
                self._chunk_sent = self._chunk_sent or any(live)
                message = {"type": EVENT_TYPE, "items": batch}
                # Live chunks only: a receiver that misses them re-sends them from the buffer, so
                # a layer that can (thinkproject.channel_layer) spares the Redis round trip when
                # no other process listens. Stream starts and ends always travel.
                send_lossy = getattr(self.layer, "group_send_lossy", None)
                if send_lossy is not None and all(live):
                    await send_lossy(self.group, message)
                else:
                    await self.layer.group_send(self.group, message)

    async def close(self) -> None:
        """Flush now and wait for a batch on its way, so nothing is left behind (a flush task still
        waiting out its window has nothing left to send: it is cancelled rather than waited out)."""
        await self.flush()
        task = self._flush_task
        if task is not None:
            if self._in_window:
                task.cancel()
            await asyncio.wait([task])
            if not task.cancelled():
                task.result()  # a batch that failed on its way fails the close


async def publish(instance_pk: int, *frames: Frame, **options: Any) -> None:
    """Send frames right away (outside a streaming turn), in order, as one group event."""
    await _group_event(instance_pk, [Item.frame_entry(frame, **options) for frame in frames])


async def publish_item(instance_pk: int, item: Item) -> None:
    await _group_event(instance_pk, [item.encode()])


async def _group_event(instance_pk: int, entries: list[dict[str, Any]]) -> None:
    await get_channel_layer().group_send(group_name(instance_pk), {"type": EVENT_TYPE, "items": entries})
