"""``streaming.fanout.Publisher``: the reply's first chunk leaves at once, behind the stream's start;
the end of a turn (``close``) sends what waits for the batch window at once, and does not wait the
window out: the turn ends with its last frame."""

import asyncio

import pytest
from channels.layers import get_channel_layer

from agents_app.protocol import frames
from agents_app.streaming import fanout
from agents_app.streaming.items import Event, Item


async def test_close_sends_what_waits_for_the_window_without_waiting_it_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # A close that waited the window out would not return within the test's bound.
    monkeypatch.setattr(fanout, "BATCH_WINDOW", 3600)
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(fanout.group_name(4242), channel)
    publisher = fanout.Publisher(4242)
    await publisher.send(_chunk(0), request_id="r1")  # the first chunk leaves at once
    first = await layer.receive(channel)
    while publisher.flushing:  # that batch's task has ended
        await asyncio.sleep(0)
    await publisher.send(frames.done(request_id="r1"), request_id="r1")  # waits for the window
    assert publisher.flushing
    await asyncio.wait_for(publisher.close(), timeout=60)
    second = await layer.receive(channel)
    assert [item["seq"] for item in first["items"]] == [0]
    assert len(second["items"]) == 1 and '"done":true' in second["items"][0]["text"]
    assert not publisher.flushing


async def test_the_first_chunk_does_not_wait_for_the_window_behind_the_streams_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A chunk that waited the window out would not arrive within the test's bound.
    monkeypatch.setattr(fanout, "BATCH_WINDOW", 3600)
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(fanout.group_name(4243), channel)
    publisher = fanout.Publisher(4243)
    await publisher.send_item(Item(event=Event.STREAM_START, request_id="r1"))
    start = await asyncio.wait_for(layer.receive(channel), timeout=60)
    while publisher.flushing:
        await asyncio.sleep(0)
    await publisher.send(_chunk(0), request_id="r1")
    chunk = await asyncio.wait_for(layer.receive(channel), timeout=60)
    assert [item["event"] for item in start["items"]] == [str(Event.STREAM_START)]
    assert [item["seq"] for item in chunk["items"]] == [0]
    await publisher.send(_chunk(1), request_id="r1")  # after a chunk: the window
    assert publisher.flushing
    await asyncio.wait_for(publisher.close(), timeout=60)
    assert [item["seq"] for item in (await layer.receive(channel))["items"]] == [1]


def _chunk(seq: int) -> frames.Frame:
    return frames.chunk(request_id="r1", body='{"type":"text-delta","id":"t","delta":"w"}', seq=seq,
                        continuation=False)
