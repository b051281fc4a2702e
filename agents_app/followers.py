"""Following one turn's reply from code, on any process: what ``chat()`` hands to its callback.

A follower joins the instance's fan-out group on a channel of its own *before* the turn is
queued, so it sees the stream from its first chunk wherever the turn runs, and routes what arrives
through the same resume session as a WebSocket (``agents_app.streaming.resume``): a dropped batch
is re-sent from the stream buffer, so the callback gets every chunk once, in order. With no frame
for ``WATCH_SECONDS`` it reads the turn's row: a turn that ended while its last batch was lost is
finished from the buffer; one whose process died ends the follow as *interrupted*. The receive loop
is never cancelled (with channels_redis that can lose another channel's message, ``turns.control``):
it is woken by messages it sends itself.
"""

import asyncio
import contextlib
import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from .models import AgentInstance, Turn
from .protocol import frames
from .protocol.types import MessageType, Outcome
from .recovery import liveness
from .recovery import service as recovery
from .streaming import buffer, fanout, handshake
from .streaming.items import Item, decode_batch
from .streaming.resume import ResumeDriver

logger = logging.getLogger("agents_app.followers")

# Seconds without a frame after which the follower looks at the turn's row.
WATCH_SECONDS = 2.0
# Messages the follower sends to its own channel: look at the row; stop.
_CHECK = "follower.check"
_STOP = "follower.stop"

Ending = Literal["completed", "error", "aborted", "skipped", "interrupted"]


@dataclass
class StreamCallback:
    """What ``chat()`` calls, each optional and sync or async (the reference's ``StreamCallback``).

    ``on_start({"request_id"})`` first, then ``on_event(chunk_json)`` for every chunk of the reply,
    then one of ``on_done()``, ``on_error(message)`` or ``on_interrupted()`` (the turn was cut and
    a recovery continuation owns its result); an aborted or skipped turn calls none of the three.
    Any object with these methods does as well.
    """

    on_start: Callable[[dict[str, Any]], Any] | None = None
    on_event: Callable[[str], Any] | None = None
    on_done: Callable[[], Any] | None = None
    on_error: Callable[[str], Any] | None = None
    on_interrupted: Callable[[], Any] | None = None


async def notify(callback: Any, name: str, *args: Any) -> None:
    """Call ``callback.<name>(*args)`` if it has one; what it raises is logged, never passed on."""
    method = getattr(callback, name, None)
    if method is None:
        return
    try:
        result = method(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception("%s of a chat callback raised", name)


class TurnFollower:
    """The chunks of turn ``request_id`` of ``instance``, handed to ``callback.on_event`` as they come."""

    def __init__(self, instance: AgentInstance, request_id: str, callback: Any) -> None:
        self.instance = instance
        self.request_id = request_id
        self.callback = callback
        self.ending: Ending | None = None
        self.error: str | None = None
        self._ended = asyncio.Event()

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncIterator["TurnFollower"]:
        """Join the group now; leave it (without cancelling a receive) when the block ends."""
        layer = get_channel_layer()
        self.channel = await layer.new_channel()
        await layer.group_add(fanout.group_name(self.instance.pk), self.channel)
        self.driver = ResumeDriver(self.instance, self.channel, self._frame, self._text)
        receiving = asyncio.ensure_future(self._receive())
        watching = asyncio.ensure_future(self._watch())
        try:
            yield self
        finally:
            watching.cancel()
            await layer.send(self.channel, {"type": _STOP})
            await receiving
            self.driver.close()
            await layer.group_discard(fanout.group_name(self.instance.pk), self.channel)

    async def ended(self) -> Ending:
        await self._ended.wait()
        assert self.ending is not None
        return self.ending

    async def _receive(self) -> None:
        layer = get_channel_layer()
        while True:
            message = await layer.receive(self.channel)
            kind = message.get("type")
            if kind == _STOP:
                return
            try:
                if kind == fanout.EVENT_TYPE:
                    for item in decode_batch(message):
                        if item.addressed_to(self.channel) and not self._ended.is_set():
                            await self.driver.deliver(item)
                elif kind in (handshake.FLUSHED, handshake.FLUSH_CHECK):
                    await self.driver.on_message(message)
                elif kind == _CHECK and not self._ended.is_set():
                    await self._check()
            except Exception:  # the follow must go on (logged)
                logger.exception("following turn %s failed on %s", self.request_id, kind)

    async def _watch(self) -> None:
        """Wake the receive loop to look at the turn's row while nothing arrives."""
        layer = get_channel_layer()
        while not self._ended.is_set():
            await asyncio.sleep(WATCH_SECONDS)
            await layer.send(self.channel, {"type": _CHECK})

    async def _check(self) -> None:
        turn = await Turn.objects.filter(instance=self.instance, request_id=self.request_id).afirst()
        if turn is None or turn.status == Turn.Status.QUEUED:
            return
        if turn.status == Turn.Status.RUNNING:
            if not liveness.is_alive(turn):
                self._end("interrupted")
            return
        if turn.status == Turn.Status.ABORTED and turn.error in (recovery.INTERRUPTED, recovery.STALLED):
            self._end("interrupted")  # cut, and its terminal frame was lost: recovery owns the result
            return
        # It ended, but its terminal frame has not come: the layer lost the last batch. The
        # buffer has the chunks; a terminal item sends the missing ones first (a resync).
        stream = await database_sync_to_async(buffer.by_request)(self.instance, self.request_id)
        stored = await database_sync_to_async(buffer.read)(stream) if stream is not None else []
        self.error = self.error or turn.error or None
        outcome = {Turn.Status.ERROR: Outcome.ERROR, Turn.Status.ABORTED: Outcome.ABORTED,
                   Turn.Status.SKIPPED: Outcome.SKIPPED}.get(Turn.Status(turn.status))
        terminal = frames.done(request_id=self.request_id, outcome=outcome)
        await self.driver.deliver(Item.frame(terminal, request_id=self.request_id,
                                             last_seq=stored[-1][0] if stored else -1))

    async def _frame(self, frame: frames.Frame) -> None:
        await self._text(frames.encode(frame))

    async def _text(self, text: str) -> None:
        frame = json.loads(text)
        if frame.get("type") != MessageType.USE_CHAT_RESPONSE or frame.get("id") != self.request_id:
            return
        if frame.get("error"):
            self.error = frame.get("body") or self.error
        if frame.get("done"):
            outcome = frame.get("outcome")
            if frame.get("error") or outcome == Outcome.ERROR:
                self._end("error")
            else:
                self._end("interrupted" if outcome == Outcome.RECOVERING else outcome or "completed")
        elif frame.get("body") and not frame.get("error"):
            await notify(self.callback, "on_event", frame["body"])

    def _end(self, ending: str) -> None:
        self.ending = ending  # type: ignore[assignment] - the outcomes of a done frame are Endings
        self._ended.set()
