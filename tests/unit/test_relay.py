"""``web._relay.dispatch_in_turn``: what Channels' ``await_many_dispatch`` promised the consumer,
with one task per source instead of one per message."""

import asyncio
from typing import Any

import pytest

from agents_app.web._relay import dispatch_in_turn


class Done(Exception):
    """What a dispatch raises to end the loop (as ``StopConsumer`` does)."""


class Source:
    """A queue read as a source, counting how often it was asked for a message."""

    def __init__(self, *messages: Any) -> None:
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        for message in messages:
            self.queue.put_nowait(message)
        self.asked = 0
        self.cancelled = False

    async def __call__(self) -> Any:
        self.asked += 1
        try:
            message = await self.queue.get()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if isinstance(message, BaseException):
            raise message
        return message


async def test_every_message_is_dispatched_in_its_sources_order_one_at_a_time() -> None:
    client, layer = Source(*[f"c{i}" for i in range(5)]), Source(*[f"l{i}" for i in range(5)])
    seen: list[str] = []
    running = 0

    async def dispatch(message: str) -> None:
        nonlocal running
        running += 1
        assert running == 1  # never two dispatches at once
        await asyncio.sleep(0)
        seen.append(message)
        running -= 1
        if len(seen) == 10:
            raise Done

    with pytest.raises(Done):
        await dispatch_in_turn([client, layer], dispatch)
    assert sorted(seen) == sorted([f"c{i}" for i in range(5)] + [f"l{i}" for i in range(5)])
    assert [m for m in seen if m[0] == "c"] == [f"c{i}" for i in range(5)]
    assert [m for m in seen if m[0] == "l"] == [f"l{i}" for i in range(5)]


async def test_a_source_has_at_most_one_message_waiting_behind_the_one_dispatched() -> None:
    layer = Source(*range(4))
    asked_at_dispatch: list[int] = []

    async def dispatch(message: int) -> None:
        asked_at_dispatch.append(layer.asked)
        for _ in range(3):
            await asyncio.sleep(0)  # time for a source that did not wait to ask again
        asked_at_dispatch.append(layer.asked)
        if message == 3:
            raise Done

    with pytest.raises(Done):
        await dispatch_in_turn([Source(), layer], dispatch)
    # Message i was taken on the (i+1)th ask; during its dispatch the next one is taken (and
    # waits), and no more: the (i+3)th ask waits for that one's dispatch to begin.
    assert asked_at_dispatch == [1, 2, 2, 3, 3, 4, 4, 5]
    assert layer.queue.qsize() == 0


async def test_a_message_taken_during_a_long_dispatch_goes_before_later_ones_of_other_sources() -> None:
    """A resume request the client sent while a tool approval was dispatched is answered before
    the continuation's first chunks, which the channel layer delivered after it."""
    client, layer = Source("approval", "resume request"), Source()
    seen: list[str] = []

    async def dispatch(message: str) -> None:
        seen.append(message)
        if message == "approval":
            for _ in range(10):
                await asyncio.sleep(0)  # time for the client's next frame to be taken meanwhile
            layer.queue.put_nowait("first chunk")
            for _ in range(3):
                await asyncio.sleep(0)  # and the layer's batch arrives before the dispatch ends
        if len(seen) == 3:
            raise Done

    with pytest.raises(Done):
        await dispatch_in_turn([client, layer], dispatch)
    assert seen == ["approval", "resume request", "first chunk"]


async def test_a_failing_source_ends_the_loop_with_its_error_and_the_other_source_is_cancelled() -> None:
    client, layer = Source(), Source("first", RuntimeError("layer gone"))
    seen: list[str] = []

    async def dispatch(message: str) -> None:
        seen.append(message)

    with pytest.raises(RuntimeError, match="layer gone"):
        await dispatch_in_turn([client, layer], dispatch)
    assert seen == ["first"]
    assert client.cancelled


async def test_a_cancelled_loop_cancels_its_sources() -> None:
    client, layer = Source(), Source()
    dispatch_called = asyncio.Event()

    async def dispatch(message: Any) -> None:
        dispatch_called.set()

    task = asyncio.ensure_future(dispatch_in_turn([client, layer], dispatch))
    while client.asked == 0 or layer.asked == 0:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.cancelled and layer.cancelled
    assert not dispatch_called.is_set()
