"""The resume handshake (spec cloudflare-agents.md §2.7, js-client-protocol.md §6).

``load_state`` reads what the database says about an instance's streams; ``on_connect``,
``on_request`` and ``on_ack`` decide, as pure functions of that state, what a connection is told.
``ResumeSession`` holds one connection's side of it: which live frames it must not get yet, and
the live frames it holds back while a replay is in flight, so the client sees every chunk once,
in order.
"""

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from ..models import AgentInstance, StreamRecord, Turn
from ..protocol import frames
from ..protocol.types import Outcome, StreamResumeNoneReason
from ..turns import control
from ..turns.lock import control_channel_of, is_orphaned
from . import buffer

# How long a reader waits for the writer to flush before looking at the database again.
FLUSH_REPLY_TIMEOUT = timedelta(seconds=1)


@dataclass(frozen=True, kw_only=True)
class ResumeState:
    """What a handshake decision needs to know about the instance, read in one go."""

    active_request_id: str | None = None
    active_continuation: bool = False
    active_orphaned: bool = False
    control_channel: str | None = None
    turn_pk: int | None = None
    terminal_request_id: str | None = None
    pending_request_id: str | None = None
    pending_turn_pk: int = 0


def load_state(instance: AgentInstance) -> ResumeState:
    stream = (
        StreamRecord.objects.filter(instance=instance, status=StreamRecord.Status.STREAMING)
        .select_related("turn").last()
    )
    instance.refresh_from_db(fields=["terminal_request_id"])
    pending = (
        Turn.objects.filter(instance=instance, status__in=[Turn.Status.QUEUED, Turn.Status.RUNNING])
        .values("pk", "request_id").last()
    )
    pending_id, pending_pk = (pending["request_id"], pending["pk"]) if pending else (None, 0)
    if stream is None:
        return ResumeState(terminal_request_id=instance.terminal_request_id or None,
                           pending_request_id=pending_id, pending_turn_pk=pending_pk)
    turn = stream.turn
    return ResumeState(
        active_request_id=stream.request_id,
        active_continuation=stream.continuation,
        active_orphaned=turn is None or is_orphaned(turn),
        control_channel=control_channel_of(turn) if turn else None,
        turn_pk=turn.pk if turn else None,
        terminal_request_id=instance.terminal_request_id or None,
        pending_request_id=pending_id,
        pending_turn_pk=pending_pk,
    )


def on_connect(state: ResumeState) -> dict[str, Any] | None:
    """The chat frame sent before identity: resume an active stream, or keep waiting for one."""
    if state.active_request_id:
        return frames.stream_resuming(request_id=state.active_request_id)
    if state.pending_request_id:
        return frames.stream_pending(request_id=state.pending_request_id)
    return None


def on_request(state: ResumeState, probe_id: str | None) -> dict[str, Any]:
    """Answer to ``cf_agent_stream_resume_request``; first match wins (spec §2.7)."""
    if state.active_request_id:
        return frames.stream_resuming(request_id=state.active_request_id, probe_id=probe_id)
    if state.terminal_request_id:
        return frames.stream_resuming(request_id=state.terminal_request_id, probe_id=probe_id)
    if state.pending_request_id:
        return frames.stream_pending(request_id=state.pending_request_id, probe_id=probe_id)
    return frames.stream_resume_none(reason=StreamResumeNoneReason.IDLE, probe_id=probe_id)


@dataclass
class Replay:
    """A replay in flight: live frames of the instance are held back until it is sent."""

    request_id: str
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    held: list[dict[str, Any]] = field(default_factory=list)


class ResumeSession:
    """One connection's resume state.

    Invariants: while ``awaiting_ack`` is set the connection gets no live broadcast (as the
    reference server adds pending-resume connections to every broadcast's exclusions); while
    ``replay`` is set every live item is held and released after the replayed chunks, minus the
    chunks the replay already sent (by ``seq``).
    """

    def __init__(self) -> None:
        self.awaiting_ack: str | None = None
        self.parked = False
        # The turn a parked connection waits for: an idle event about older turns is stale.
        self.parked_turn_pk = 0
        self.replay: Replay | None = None
        # (request id, last replayed seq): live chunks the replay already sent, arriving late.
        self.replayed: tuple[str, int] | None = None
        # Requests a replay closed with a terminal frame; their late live frames are dropped.
        self.closed: set[str] = set()

    def note_sent(self, frame: dict[str, Any] | None, pending_turn_pk: int = 0) -> None:
        """Record what a handshake frame we sent obliges us to."""
        if frame is None:
            return
        if frame["type"] == frames.MessageType.STREAM_RESUMING:
            self.awaiting_ack, self.parked = frame["id"], False
        elif frame["type"] == frames.MessageType.STREAM_PENDING:
            self.parked, self.parked_turn_pk = True, pending_turn_pk

    def admit(self, item: dict[str, Any]) -> bool:
        """Whether a live fan-out item goes to the socket now (False: dropped or held)."""
        if self.replay is not None:
            self.replay.held.append(item)
            return False
        if self.awaiting_ack:
            return False
        return not self._already_replayed(item)

    def _already_replayed(self, item: dict[str, Any]) -> bool:
        if item.get("rid") is not None and item["rid"] in self.closed:
            return True
        if self.replayed is None or item.get("rid") != self.replayed[0]:
            return False
        return 0 <= item.get("seq", -1) <= self.replayed[1]

    def close_request(self, request_id: str) -> None:
        """A replay ended this request with its own terminal frame: live frames of it are stale."""
        self.closed.add(request_id)

    def start_replay(self, request_id: str) -> Replay:
        self.awaiting_ack = None
        self.replay = Replay(request_id)
        return self.replay

    def finish_replay(self, last_seq: int) -> list[dict[str, Any]]:
        """End the replay; the held items still to send (chunks up to ``last_seq`` were replayed)."""
        replay, self.replay = self.replay, None
        if replay is None:
            return []
        self.replayed = (replay.request_id, last_seq)
        return [item for item in replay.held if not self._already_replayed(item)]


class ResumeDriver:
    """Runs the handshake for one connection: the consumer forwards events, this sends frames."""

    def __init__(self, instance: AgentInstance, channel_name: str, send_frame: Any, send_text: Any) -> None:
        self.instance = instance
        self.channel_name = channel_name
        self.send_frame = send_frame
        self.send_text = send_text
        self.session = ResumeSession()
        self._timers: set[asyncio.Task[None]] = set()

    async def _state(self) -> ResumeState:
        return await database_sync_to_async(load_state)(self.instance)

    async def connect(self) -> None:
        state = await self._state()
        frame = on_connect(state)
        if frame is not None:
            await self.send_frame(frame)
            self.session.note_sent(frame, state.pending_turn_pk)

    async def request(self, probe_id: str | None) -> None:
        state = await self._state()
        frame = on_request(state, probe_id)
        await self.send_frame(frame)
        self.session.note_sent(frame, state.pending_turn_pk)

    async def ack(self, request_id: str) -> None:
        """ACK → replay (spec §2.7 ACK cases 1-5)."""
        if self.session.awaiting_ack == request_id:
            self.session.awaiting_ack = None
        if self.session.replay is not None and self.session.replay.request_id == request_id:
            return  # a duplicate ACK: the replay in flight answers it
        state = await self._state()
        if state.active_request_id and state.active_request_id != request_id:
            return  # case 2: an ACK for something else while a stream runs is ignored
        if state.active_request_id == request_id and not state.active_orphaned:
            replay = self.session.start_replay(request_id)
            await self._ask_flush(state, replay)
            return
        if state.active_request_id == request_id:
            await self._replay_orphan(request_id)
        elif state.terminal_request_id == request_id:
            await self._replay_terminal(request_id)
        else:
            await self._replay_finished(request_id)

    async def _ask_flush(self, state: ResumeState, replay: Replay) -> None:
        """Ask the writer to store its buffered chunks; it answers ``stream.flushed``.

        A check is scheduled too: without an answer in time, ``flush_overdue`` looks again.
        """
        if state.turn_pk is not None:
            await control.send(state.control_channel, state.turn_pk, {
                "type": FLUSH_REQUEST, "reply_to": self.channel_name, "token": replay.token,
            })
        timer = asyncio.ensure_future(self._check_later(replay.token))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _check_later(self, token: str) -> None:
        await asyncio.sleep(FLUSH_REPLY_TIMEOUT.total_seconds())
        await get_channel_layer().send(self.channel_name, {"type": FLUSH_CHECK, "token": token})

    def close(self) -> None:
        for timer in list(self._timers):
            timer.cancel()

    async def flushed(self, token: str) -> None:
        """The writer has stored every chunk sent so far: replay them, then release held frames."""
        replay = self.session.replay
        if replay is None or replay.token != token:
            return
        stream = await database_sync_to_async(buffer.by_request)(self.instance, replay.request_id)
        chunks = await database_sync_to_async(buffer.read)(stream) if stream else []
        continuation = bool(stream and stream.continuation)
        last = await self._send_chunks(replay.request_id, chunks, continuation)
        held = self.session.finish_replay(last)
        # The writer answered, so the stream was live when asked: its terminal frame has not been
        # through this connection yet (it is held, or on its way) and ends the stream for the client.
        await self.send_frame(frames.replay_complete(request_id=replay.request_id, continuation=continuation))
        for entry in held:
            await self.deliver(entry)

    async def flush_overdue(self, token: str) -> None:
        """No flush answer in time: the stream ended meanwhile, or its writer died."""
        replay = self.session.replay
        if replay is None or replay.token != token:
            return
        state = await self._state()
        if state.active_request_id == replay.request_id and not state.active_orphaned:
            replay.token = uuid.uuid4().hex
            await self._ask_flush(state, replay)
        elif state.active_request_id == replay.request_id:
            self.session.replay = None
            await self._replay_orphan(replay.request_id, held=replay.held)
        else:
            # The stream ended meanwhile: its terminal frame is held or on its way, as above.
            await self.flushed(token)

    async def _send_chunks(self, request_id: str, chunks: list[tuple[int, str]], continuation: bool) -> int:
        last = -1
        for index, body in chunks:
            await self.send_frame(frames.chunk(request_id=request_id, body=body, seq=index,
                                               continuation=continuation, replay=True))
            last = index
        return last

    async def _replay_orphan(self, request_id: str, held: list[dict[str, Any]] | None = None) -> None:
        """Case 1, orphaned: replay what was stored, close it, and persist the partial reply."""
        from .. import recovery

        stream = await database_sync_to_async(buffer.by_request)(self.instance, request_id)
        chunks = await database_sync_to_async(buffer.read)(stream) if stream else []
        await self._send_chunks(request_id, chunks, bool(stream and stream.continuation))
        self.session.close_request(request_id)
        await self.send_frame(frames.done(request_id=request_id, replay=True, outcome=Outcome.ABORTED,
                                          continuation=bool(stream and stream.continuation)))
        if stream is not None:
            await recovery.finalize_orphan(stream.pk)

    async def _replay_terminal(self, request_id: str) -> None:
        """Case 3: a turn that failed while this client was away: its chunks, then its error."""
        stream = await database_sync_to_async(buffer.by_request)(self.instance, request_id)
        if stream is not None:
            await self._send_chunks(request_id, await database_sync_to_async(buffer.read)(stream),
                                    stream.continuation)
        await database_sync_to_async(self.instance.refresh_from_db)(fields=["terminal_error"])
        self.session.close_request(request_id)
        await self.send_frame(frames.thrown_error(request_id=request_id,
                                                  error_text=self.instance.terminal_error or "Error"))

    async def _replay_finished(self, request_id: str) -> None:
        """Cases 4-5: a finished buffer is replayed and closed; without one, just the close."""
        stream = await database_sync_to_async(buffer.by_request)(self.instance, request_id)
        chunks: list[tuple[int, str]] = []
        if stream is not None and stream.status == StreamRecord.Status.COMPLETED:
            chunks = await database_sync_to_async(buffer.read)(stream)
        continuation = bool(stream and stream.continuation)
        await self._send_chunks(request_id, chunks, continuation)
        self.session.close_request(request_id)
        await self.send_frame(frames.done(request_id=request_id, replay=True, continuation=continuation))

    async def deliver(self, entry: dict[str, Any]) -> None:
        """A live fan-out item: a frame for the socket, or a control event for the handshake."""
        name = entry.get("event")
        if name == STREAM_START and self.session.parked:
            frame = frames.stream_resuming(request_id=entry["rid"])
            await self.send_frame(frame)
            self.session.note_sent(frame)
        elif name == TURNS_IDLE and self.session.parked and entry.get("turn", 0) >= self.session.parked_turn_pk:
            self.session.parked = False
            await self.send_frame(frames.stream_resume_none(reason=StreamResumeNoneReason.IDLE))
        elif name is None and self.session.admit(entry):
            await self.send_text(entry["text"])


# Control events published by the turn engine to the instance group.
STREAM_START = "stream-start"
TURNS_IDLE = "turns-idle"
# Sent to a turn's control channel by a reader about to replay; the answer is FLUSHED.
FLUSH_REQUEST = "stream.flush"
FLUSHED = "stream.flushed"
# Sent by a reader to itself when the writer's answer is overdue.
FLUSH_CHECK = "stream.flush_check"
