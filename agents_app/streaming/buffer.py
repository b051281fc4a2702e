"""The resumable stream buffer: a turn's chunks, stored in the database for every process.

Chunks are packed up to ``CHUNK_BUFFER_SIZE`` to a row, a row is written once its first chunk is
``ROW_MAX_AGE`` old or it reaches ``SEGMENT_MAX_BYTES``, and a single chunk above
``CHUNK_MAX_BYTES`` is broadcast but not stored (docs/protocol.md#stream-storage). Rows by time
keep a burst to a few INSERTs and a slow stream's crash window to a quarter of a second
(docs/operations.md#what-a-crash-loses). Unflushed chunks live in the writer's memory; a
reconnecting reader asks the writer to flush first (``turns.control``), so it never sees a gap.
"""

import asyncio
import json
import logging
import weakref
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from .. import database, statements
from ..messages import MessageBuilder, UIMessage, builder_for_reply
from ..models import AgentInstance, StreamRecord, StreamSegment, Turn

logger = logging.getLogger("agents_app.streaming")

# Chunks per stored row at most.
CHUNK_BUFFER_SIZE = 100
# A row is written when its first chunk is this old (seconds), full or not.
ROW_MAX_AGE = 0.25
# A row is written early when its chunks reach this many bytes (UTF-8 of the bodies).
SEGMENT_MAX_BYTES = 512_000
# A chunk bigger than this is sent to clients but not stored (row-size headroom).
CHUNK_MAX_BYTES = 1_800_000
# Finished buffers are kept this long after completion, for late reconnects (10 minutes).
COMPLETED_RETENTION = timedelta(minutes=10)
# A streaming buffer with no chunk for this long is abandoned and removed (1 hour).
ABANDONED_RETENTION = timedelta(hours=1)


class StreamWriter:
    """Appends one turn's chunks to its ``StreamRecord``, packed into rows.

    Full rows are written in the background, in order, with the rows every other writer of the
    event loop sealed meanwhile (``_Batches``), so storing never holds up streaming; ``flush()``
    waits until everything appended so far is in the database.
    """

    def __init__(self, stream_pk: int, *, enabled: bool = True) -> None:
        self.stream_pk = stream_pk
        self.enabled = enabled
        self._bodies: list[str] = []
        self._bytes = 0
        self._first_index = 0
        self._rows: list[tuple[int, list[str]]] = []
        # The batch that stores the rows queued last: done when they (and every earlier one) are.
        self._pending: asyncio.Future[None] | None = None
        # Rows handed to the end of the turn to store (``take``): done when they are.
        self._taken: asyncio.Future[None] | None = None
        self._row_timer: asyncio.TimerHandle | None = None
        # Index of the last chunk handed to append(), stored or not.
        self.last_index = -1

    def append(self, index: int, body: str) -> None:
        """Buffer chunk ``index``; a full row is queued for writing."""
        self.last_index = index
        if not self.enabled:
            return
        size = len(body.encode())
        if size > CHUNK_MAX_BYTES:
            self._close_row()
            self._first_index = index + 1
            return
        if self._bodies and self._bytes + size > SEGMENT_MAX_BYTES:
            self._close_row()
        if not self._bodies:
            self._first_index = index
            self._row_timer = asyncio.get_running_loop().call_later(ROW_MAX_AGE, self._close_row)
        self._bodies.append(body)
        self._bytes += size
        if len(self._bodies) >= CHUNK_BUFFER_SIZE or self._bytes >= SEGMENT_MAX_BYTES:
            self._close_row()

    def _seal_row(self) -> None:
        """Queue the open row for writing (not yet written)."""
        if self._row_timer is not None:
            self._row_timer.cancel()
            self._row_timer = None
        if self._bodies:
            self._rows.append((self._first_index, self._bodies))
            self._first_index += len(self._bodies)
            self._bodies, self._bytes = [], 0

    def _close_row(self) -> None:
        self._seal_row()
        if self._rows:
            self._pending = _batches().enqueue(self)

    def hand_over(self) -> list[tuple[int, list[str]]]:
        """The sealed rows, for the batch being written (``_Batches`` only)."""
        rows, self._rows = self._rows, []
        return rows

    async def _written(self) -> None:
        """Wait for the rows queued so far; a failed write is raised once, to the first to wait."""
        pending = self._pending
        if pending is None:
            return
        try:
            await asyncio.shield(pending)
        finally:
            if self._pending is pending:
                self._pending = None

    async def flush(self) -> int:
        """Store everything appended so far; returns the index of the last chunk appended before
        the call. Chunks appended while the rows are written are not covered: a reader that took
        the index at the end of the wait as stored skipped the one that came meanwhile.

        Flushes of any writers of the loop that come together share one write (``_Batches``): a
        mass reconnect asks every writer of a process at once (docs/architecture.md#stream-buffer).
        """
        self._close_row()
        covered = self.last_index
        await self._written()
        if self._taken is not None:
            await asyncio.shield(self._taken)
        return covered

    async def take(self) -> list[tuple[int, list[str]]]:
        """The rows not stored yet, once every earlier one is, for the caller to store with
        ``write_rows`` or ``finish`` in its own transaction (the end of a turn: one thread hop fewer); until it
        says ``stored()``, ``flush()`` waits for them as for its own."""
        self._seal_row()
        await self._written()
        rows = self.hand_over()
        self._taken = asyncio.get_running_loop().create_future()
        return rows

    def stored(self) -> None:
        """The rows of ``take()`` are stored (or failed to be): flushes go on."""
        if self._taken is not None and not self._taken.done():
            self._taken.set_result(None)


class _Batches:
    """The sealed rows of every writer on one event loop, written one batch at a time: one unit
    (``database.run``: on the SQLite fast path, else a thread hop) and one transaction for all the
    streams whose rows (or flushes) came while the previous batch was written. Per stream, rows
    are stored in the order they were sealed."""

    def __init__(self) -> None:
        # Writers with sealed rows, in the order they queued them (a dict as an ordered set).
        self._queued: dict[StreamWriter, None] = {}
        # Done when the batch being gathered is stored.
        self._next: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def enqueue(self, writer: StreamWriter) -> "asyncio.Future[None]":
        """Queue ``writer``'s sealed rows; the future is done when they are stored."""
        self._queued[writer] = None
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        if self._task is None:
            self._task = asyncio.ensure_future(self._write())
        return self._next

    async def _write(self) -> None:
        try:
            while self._queued:
                writers, self._queued = list(self._queued), {}
                done, self._next = self._next, None
                assert done is not None
                batch = [(writer.stream_pk, writer.hand_over()) for writer in writers]
                try:
                    await database.run(write_batch, batch, close_old_connections=False)
                except Exception as exc:  # every writer in the batch lost these rows: their flushes raise
                    logger.exception("Storing the rows of %d stream buffer(s) failed", len(batch))
                    done.set_exception(exc)
                    done.exception()  # logged here, raised to whoever flushes
                else:
                    done.set_result(None)
        finally:
            self._task = None


_loop_batches: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batches]" = weakref.WeakKeyDictionary()


def _batches() -> _Batches:
    loop = asyncio.get_running_loop()
    batches = _loop_batches.get(loop)
    if batches is None:
        batches = _loop_batches[loop] = _Batches()
    return batches


def _open(stream_pk: int) -> dict[str, Any]:
    """The stream buffer, while its turn may still add to it: the recovery of a cut turn reads what
    it had stored then, so what its turn sends after (alive after all) is not stored."""
    return {"pk": stream_pk, "status": StreamRecord.Status.STREAMING}


def write_rows(stream_pk: int, rows: list[tuple[int, list[str]]]) -> None:
    """Store rows of one stream's chunks (``StreamWriter.take``), in the caller's transaction."""
    write_batch([(stream_pk, rows)])


def write_batch(batch: list[tuple[int, list[tuple[int, list[str]]]]]) -> None:
    """Store rows of chunks of several streams (``_Batches``), in one transaction, or in the caller's."""
    batch = [(stream_pk, rows) for stream_pk, rows in batch if rows]
    if not batch:
        return
    now = timezone.now()
    if len(batch) == 1:
        # The common case, one stream: on PostgreSQL one statement (docs/decisions.md#postgresql-on-the-turn-path).
        [(stream_pk, rows)] = batch
        # A clear may have deleted the buffer mid-turn, or a recovery closed it (its turn judged dead,
        # ``recovery.cut``): its chunks then have nowhere to go.
        statements.update_then_insert(StreamRecord, _open(stream_pk), {"last_chunk_at": now},
                                      _segments(stream_pk, rows))
        return
    # No savepoint inside a caller's transaction (the end of a turn): a failure fails that too.
    with transaction.atomic(savepoint=False):
        segments: list[StreamSegment] = []
        for stream_pk, rows in batch:
            if statements.update(StreamRecord, _open(stream_pk), last_chunk_at=now):
                segments += _segments(stream_pk, rows)
        statements.insert_many(segments)


def start(turn: Turn, message_id: str) -> StreamRecord:
    """Open the buffer of a turn that starts streaming."""
    record = new_record(turn, message_id)
    statements.insert(record)
    return record


def new_record(turn: Turn, message_id: str) -> StreamRecord:
    """The buffer ``start`` stores, unsaved: an admission that inserts the turn it starts at once
    stores both in one statement (``turns.admission.accept_chat``)."""
    return StreamRecord(instance_id=turn.instance_id, turn=turn, request_id=turn.request_id,
                        message_id=message_id, continuation=turn.continuation)


def finish(stream_pk: int, rows: list[tuple[int, list[str]]], *, error: bool) -> None:
    """Store a turn's last rows of chunks (``StreamWriter.take``) and close its buffer, in the
    caller's transaction: one update of the stream's row, which its rows follow when it was still
    open (``write_batch``'s rule), and on PostgreSQL one statement, where writing the rows and then
    closing the buffer took two updates of the row."""
    now = timezone.now()
    values: dict[str, Any] = {"status": StreamRecord.Status.ERROR if error else StreamRecord.Status.COMPLETED,
                              "completed_at": now}
    if rows:
        values["last_chunk_at"] = now
    statements.update_then_insert(StreamRecord, _open(stream_pk), values, _segments(stream_pk, rows))


def _segments(stream_pk: int, rows: list[tuple[int, list[str]]]) -> list[StreamSegment]:
    return [StreamSegment(stream_id=stream_pk, first_index=first, bodies=json.dumps(bodies)) for first, bodies in rows]


def read(stream: StreamRecord) -> list[tuple[int, str]]:
    """Every stored chunk of the stream as (index, body), in order."""
    chunks: list[tuple[int, str]] = []
    # Plain values, not model instances: a replay reads every row of a long stream.
    for first_index, bodies in StreamSegment.objects.filter(stream=stream).values_list("first_index", "bodies"):
        chunks.extend(enumerate(json.loads(bodies), start=first_index))
    return chunks


def partial_reply(stream: StreamRecord, messages: list[UIMessage]) -> MessageBuilder:
    """The reply of ``stream`` as far as its stored chunks go, over the transcript ``messages``."""
    builder = builder_for_reply(messages, continuation=stream.continuation, message_id=stream.message_id)
    for _, body in read(stream):
        builder.apply(json.loads(body))
    return builder


def streaming(instance: AgentInstance) -> StreamRecord | None:
    """The instance's stream that is still being written, if any."""
    return StreamRecord.objects.filter(instance=instance, status=StreamRecord.Status.STREAMING).last()


def by_request(instance: AgentInstance, request_id: str) -> StreamRecord | None:
    return StreamRecord.objects.filter(instance=instance, request_id=request_id).last()


def read_request(instance: AgentInstance, request_id: str) -> tuple[StreamRecord | None, list[tuple[int, str]]]:
    """The request's stream buffer, if kept, and every chunk stored in it (``read``): a replay's one
    thread hop and one statement (``statements.stream_and_segments``)."""
    rows = _STREAM_AND_SEGMENTS.rows(instance.pk, request_id)
    if not rows:
        return None, []
    stream = _STREAM.instance(rows[0], 0, _STREAM_AND_SEGMENTS.connection)
    assert isinstance(stream, StreamRecord)
    chunks: list[tuple[int, str]] = []
    for *_, first_index, bodies in rows:
        if bodies is not None:
            chunks.extend(enumerate(json.loads(bodies), start=first_index))
    return stream, chunks


_STREAM = statements.Columns(StreamRecord, "s")
_STREAM_AND_SEGMENTS = statements.stream_and_segments(_STREAM, StreamSegment)


def delete_all(instance: AgentInstance) -> None:
    """Clear: every buffer of the instance goes (cascade deletes the segments)."""
    StreamRecord.objects.filter(instance=instance).delete()


def sweep_expired(*, now: datetime | None = None, batch_size: int = 1000) -> int:
    """Delete finished buffers past retention and abandoned streaming ones; returns how many.

    Idempotent and batched, so the periodic task never holds a long transaction.
    """
    now = now or timezone.now()
    expired = Q(status__in=[StreamRecord.Status.COMPLETED, StreamRecord.Status.ERROR],
                completed_at__lt=now - COMPLETED_RETENTION)
    expired |= Q(status=StreamRecord.Status.STREAMING, last_chunk_at__lt=now - ABANDONED_RETENTION)
    deleted = 0
    while True:
        ids = list(StreamRecord.objects.filter(expired).values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        StreamRecord.objects.filter(pk__in=ids).delete()
        deleted += len(ids)
