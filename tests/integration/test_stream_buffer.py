"""The stream buffer's packing, reading and retention.

See docs/architecture.md#stream-buffer and docs/protocol.md#stream-storage.
"""

import asyncio
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.utils import timezone

from agents_app.models import AgentInstance, StreamRecord, StreamSegment, Turn
from agents_app.streaming import buffer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stream(user):
    instance = AgentInstance.objects.create(slug="demo-agent", name="buf", owner=user)
    turn = Turn.objects.create(instance=instance, request_id="r1")
    return buffer.start(turn, "m1")


def write(stream, bodies, start=0):
    writer = buffer.StreamWriter(stream.pk)

    async def run():
        for index, body in enumerate(bodies, start=start):
            writer.append(index, body)
        return await writer.flush()

    return async_to_sync(run)()


def body(i, size=0):
    return json.dumps({"type": "text-delta", "id": "t", "delta": f"d{i}" + "x" * size})


def test_many_chunks_are_read_back_in_order_from_few_rows(stream):
    count = buffer.CHUNK_BUFFER_SIZE * 2 + buffer.CHUNK_BUFFER_SIZE // 2
    bodies = [body(i) for i in range(count)]
    assert write(stream, bodies) == count - 1
    assert [b for _, b in buffer.read(stream)] == bodies
    assert [i for i, _ in buffer.read(stream)] == list(range(count))
    assert StreamSegment.objects.filter(stream=stream).count() == 3


def test_a_row_is_written_when_its_first_chunk_is_row_max_age_old(stream):
    """A slow stream's chunks reach the database within a quarter second, not when a row is full."""
    writer = buffer.StreamWriter(stream.pk)

    async def run():
        writer.append(0, body(0))
        writer.append(1, body(1))
        started = asyncio.get_running_loop().time()
        while not await StreamSegment.objects.filter(stream=stream).aexists():
            await asyncio.sleep(0.01)
        return asyncio.get_running_loop().time() - started

    waited = async_to_sync(run)()
    assert waited >= buffer.ROW_MAX_AGE * 0.9  # by age, not before
    assert [b for _, b in buffer.read(stream)] == [body(0), body(1)]


def test_a_flush_covers_the_chunks_appended_before_it_not_those_appended_while_it_writes(stream):
    """A resync or a resume replays the buffer up to what the flush covered, then takes live
    chunks after it: a chunk appended while the flush waits for its rows is not stored yet, and
    covering it would skip it."""
    writer = buffer.StreamWriter(stream.pk)

    async def run():
        writer.append(0, body(0))
        writer.append(1, body(1))
        flushing = asyncio.ensure_future(writer.flush())
        await asyncio.sleep(0)  # the flush has sealed its rows and waits for their write
        writer.append(2, body(2))
        covered = await flushing
        return covered, [index for index, _ in await sync_to_async(buffer.read)(stream)]

    covered, stored = async_to_sync(run)()
    assert covered == 1
    assert stored == [0, 1]


def test_rows_taken_by_the_turns_end_are_waited_for_by_a_flush(stream):
    """The end of a turn stores the last rows in its own transaction (``take``): a reader's flush
    in between returns only once they are stored, so the reader never sees a gap."""
    writer = buffer.StreamWriter(stream.pk)

    async def run():
        for index in range(3):
            writer.append(index, body(index))
        rows = await writer.take()
        flushed = asyncio.ensure_future(writer.flush())
        await asyncio.sleep(0.05)
        waiting = not flushed.done()
        await sync_to_async(buffer.write_rows)(stream.pk, rows)
        writer.stored()
        return waiting, await flushed

    waiting, last = async_to_sync(run)()
    assert waiting
    assert last == 2
    assert [b for _, b in buffer.read(stream)] == [body(0), body(1), body(2)]


def test_flushes_of_several_streams_that_come_together_share_one_write(stream):
    """A mass reconnect asks every writer of a process to flush at once: their rows go in one
    transaction (one ``now`` for every buffer touched), each flush covering its own chunks."""
    streams = [stream] + [
        buffer.start(Turn.objects.create(instance=stream.instance, request_id=f"r{n}"), f"m{n}") for n in (2, 3)
    ]
    writers = [buffer.StreamWriter(s.pk) for s in streams]

    async def run():
        for n, writer in enumerate(writers):
            for index in range(n + 2):
                writer.append(index, body(index))
        return await asyncio.gather(*(writer.flush() for writer in writers))

    assert async_to_sync(run)() == [1, 2, 3]
    for n, s in enumerate(streams):
        assert [b for _, b in buffer.read(s)] == [body(i) for i in range(n + 2)]
    touched = set(StreamRecord.objects.filter(pk__in=[s.pk for s in streams]).values_list("last_chunk_at", flat=True))
    assert len(touched) == 1


def test_rows_sealed_while_a_batch_is_written_follow_it_in_order(stream):
    """The next batch waits for the one being written: a stream's rows are stored in order."""
    writer = buffer.StreamWriter(stream.pk)

    async def run():
        writer.append(0, body(0))
        first = asyncio.ensure_future(writer.flush())
        await asyncio.sleep(0)  # the first batch is being written
        writer.append(1, body(1))
        second = await writer.flush()
        return await first, second

    assert async_to_sync(run)() == (0, 1)
    assert buffer.read(stream) == [(0, body(0)), (1, body(1))]
    assert list(StreamSegment.objects.filter(stream=stream).values_list("first_index", flat=True)) == [0, 1]


def test_a_big_chunk_starts_its_own_row(stream):
    bodies = [body(0), body(1, size=buffer.SEGMENT_MAX_BYTES), body(2)]
    write(stream, bodies)
    assert [b for _, b in buffer.read(stream)] == bodies
    assert StreamSegment.objects.filter(stream=stream).count() == 3


def test_a_chunk_over_the_row_limit_is_not_stored(stream):
    bodies = [body(0), body(1, size=buffer.CHUNK_MAX_BYTES), body(2)]
    write(stream, bodies)
    assert buffer.read(stream) == [(0, bodies[0]), (2, bodies[2])]


def test_sweep_removes_expired_buffers_only(stream, user):
    now = timezone.now()
    instance = stream.instance
    old_done = StreamRecord.objects.create(instance=instance, request_id="old", status="completed",
                                           completed_at=now - timedelta(minutes=11))
    fresh_done = StreamRecord.objects.create(instance=instance, request_id="fresh", status="error",
                                             completed_at=now - timedelta(minutes=9))
    abandoned = StreamRecord.objects.create(instance=instance, request_id="abandoned")
    StreamRecord.objects.filter(pk=abandoned.pk).update(last_chunk_at=now - timedelta(hours=1, minutes=1))
    write(stream, [body(0)])
    assert buffer.sweep_expired(now=now, batch_size=1) == 2
    assert set(StreamRecord.objects.values_list("request_id", flat=True)) == {"r1", "fresh"}
    assert buffer.sweep_expired(now=now) == 0
    assert old_done.pk and fresh_done.pk


def test_retention_task_runs_the_sweep(stream):
    from agents_app.tasks import sweep_stream_buffers

    StreamRecord.objects.filter(pk=stream.pk).update(status="completed",
                                                     completed_at=timezone.now() - timedelta(hours=1))
    assert sweep_stream_buffers.delay().get() == {"deleted": 1}
