"""The resume handshake of one connection: reads the database, applies ``streaming.handshake``.

The consumer forwards what the connection receives (resume requests, ACKs, live fan-out items,
the writer's flush answers) to a ``ResumeDriver``; the decisions are the pure functions and the
``ResumeSession`` of ``streaming.handshake``, and this module only does their I/O: it reads a
``ResumeState``, asks a turn's writer to flush (``turns.control``), reads the stream buffer, and
sends frames.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from .. import statements, transcript, turns
from ..messages import UIMessage
from ..models import AgentInstance, RecoveryIncident, StreamRecord, Turn
from ..protocol import frames
from ..protocol.types import Outcome
from ..recovery import liveness, policy
from ..recovery import service as recovery
from ..turns import control
from . import buffer, handshake
from .handshake import AckAction, OverdueAction, Replay, ResumeState, RouteKind
from .items import Item

SendFrame = Callable[[frames.Frame], Awaitable[None]]
SendText = Callable[[str], Awaitable[None]]


_STREAM = statements.Columns(StreamRecord, "s", ("id", "request_id", "continuation", "turn"))
_TURN = statements.Columns(Turn, "t", ("id", "status", "worker", "heartbeat_at", "started_at"))


def load_state(instance: AgentInstance) -> ResumeState:
    """What the database says about the instance's streams and turns, in one statement (a
    connection's connect, probe and ACK each read it: a mass reconnect reads it once per step)."""
    select = statements.resume_state(AgentInstance, _STREAM, _TURN, RecoveryIncident)
    row = select.row(StreamRecord.Status.STREAMING, *Turn.ACTIVE_STATUSES, *policy.OPEN_STATUSES, instance.pk)
    if row is None:  # destroyed meanwhile, as ``refresh_from_db`` reports it
        raise AgentInstance.DoesNotExist(f"No agent instance {instance.pk}")
    connection = select.connection
    instance.terminal_request_id = row[0]
    stream = _STREAM.instance(row, 1, connection)
    turn = _TURN.instance(row, 1 + len(_STREAM), connection)
    pending_pk, pending_id, incident_root = row[1 + len(_STREAM) + len(_TURN):]
    if stream is None:
        return ResumeState(terminal_request_id=instance.terminal_request_id or None,
                           pending_request_id=pending_id, pending_turn_pk=pending_pk or 0,
                           recovering_request_id=incident_root if pending_pk is None else None)
    return ResumeState(
        active_request_id=stream.request_id,
        active_continuation=stream.continuation,
        active_orphaned=turn is None or not liveness.is_alive(turn),
        control_channel=liveness.control_channel(turn) if turn else None,
        turn_pk=turn.pk if turn else None,
        terminal_request_id=instance.terminal_request_id or None,
        pending_request_id=pending_id,
        pending_turn_pk=pending_pk or 0,
    )


_ENDED_AND_TRANSCRIPT = statements.ended_requests_and_transcript(Turn, transcript.STORED_COLUMNS)


def _transcript_and_ended(instance: AgentInstance) -> tuple[list[UIMessage], list[str]]:
    """The stored transcript and the requests whose turns' ends it holds, read together. A failed
    turn is not among them: its error frame is how a connection learns of it (as a connecting one
    does from the handshake's case 3)."""
    read = _ENDED_AND_TRANSCRIPT.rows(instance.pk, *Turn.ACTIVE_STATUSES, Turn.Status.ERROR, instance.pk)
    ended = read[0][0] if read else None
    stored = [row[1:] for row in read if row[1] is not None]
    return transcript.from_rows(stored), json.loads(ended) if ended else []


# A replay lets the event loop run other connections after this many frames: sending only
# buffers in the transport, so 2,000 frames in one go held the whole process for ~30 ms and the
# first frame left when the last was produced.
REPLAY_YIELD_EVERY = 100

# The outcome a replayed terminal frame reports for a finished turn (none for a completed one).
_OUTCOMES = {Turn.Status.ABORTED: Outcome.ABORTED, Turn.Status.ERROR: Outcome.ERROR,
             Turn.Status.SKIPPED: Outcome.SKIPPED}


def _finished(instance: AgentInstance, request_id: str) -> tuple[StreamRecord | None, dict[str, Any] | None]:
    """The request's stream buffer, if kept, and its turn's status, error and message ids."""
    turn = Turn.objects.of(instance).filter(request_id=request_id).values("status", "error", "message_ids").first()
    return buffer.by_request(instance, request_id), turn


def _base_of_continuation(instance: AgentInstance, request_id: str) -> list[UIMessage] | None:
    """The transcript, if the continuation ``request_id`` still streams once it is read (the end of
    a turn stores its reply and closes its stream in one transaction, so this transcript has none
    of the continuation's chunks)."""
    messages = transcript.load(instance)
    streaming = StreamRecord.objects.filter(instance=instance, request_id=request_id,
                                            status=StreamRecord.Status.STREAMING).exists()
    return messages if streaming else None


class ResumeDriver:
    """Runs the handshake for one connection: the consumer forwards events, this sends frames."""

    def __init__(self, instance: AgentInstance, channel_name: str, send_frame: SendFrame, send_text: SendText) -> None:
        self.instance = instance
        self.channel_name = channel_name
        self.send_frame = send_frame
        self.send_text = send_text
        self.session = handshake.ResumeSession()
        self._timers: set[asyncio.Task[None]] = set()

    async def _state(self) -> ResumeState:
        return await database_sync_to_async(load_state)(self.instance)

    async def connect(self) -> None:
        state = await self._state()
        frame = handshake.on_connect(state)
        if frame is not None:
            await self.send_frame(frame)
            self.session.note_sent(frame, state.pending_turn_pk)

    async def request(self, probe_id: str | None) -> None:
        state = await self._state()
        frame = handshake.on_request(state, probe_id)
        await self.send_frame(frame)
        self.session.note_sent(frame, state.pending_turn_pk)

    async def ack(self, request_id: str) -> None:
        """ACK → replay (docs/protocol.md#resume-ack)."""
        # Still waiting for this ACK: the connection has seen nothing of the request's stream live.
        awaited = self.session.awaiting_ack == request_id
        if not self.session.acked(request_id):
            return  # a duplicate ACK: the replay in flight answers it
        state = await self._state()
        match handshake.decide_ack(state, request_id):
            case AckAction.REPLAY_LIVE:
                replay = self.session.start_replay(request_id)
                if state.active_continuation and self.session.needs_base():
                    await self._send_base(request_id)
                await self._ask_flush(state, replay)
            case AckAction.REPLAY_ORPHAN:
                await self._replay_orphan(request_id)
            case AckAction.REPLAY_TERMINAL:
                await self._replay_terminal(request_id)
            case AckAction.REPLAY_FINISHED:
                await self._replay_finished(request_id, awaited=awaited)
            case AckAction.IGNORE:
                pass

    async def _send_base(self, request_id: str) -> None:
        """The stored transcript, before the replay of a live continuation to a connection that has
        followed no stream: its chunks extend the stored last reply, and a client that was away may
        have missed that reply's end (a process stopped mid-reply, whose continuation runs
        elsewhere). Not sent if the continuation ended meanwhile: its reply would then be in the
        transcript and its replay would double it."""
        messages = await database_sync_to_async(_base_of_continuation)(self.instance, request_id)
        if messages is not None:
            await self.send_frame(frames.chat_messages(messages))

    async def send_transcript(self) -> None:
        """The stored transcript, to a connection that joined the group just before (a socket that
        waited on a new address, ``consumers.ChatConsumer.adopt``). Frames of the turns whose ends
        it holds, still on their way to this connection, are older than it and dropped: without
        that, a turn that ended during the read went out again after it (its lead frames, a
        transcript without its reply, first)."""
        messages, ended = await database_sync_to_async(_transcript_and_ended)(self.instance)
        for request_id in ended:
            self.session.close_request(request_id)
        if messages:
            await self.send_frame(frames.chat_messages(messages))

    # --- live items -------------------------------------------------------------------------------
    async def deliver(self, item: Item) -> None:
        """A live fan-out item: a frame for the socket, a handshake event, or a sign of a gap."""
        route = self.session.route(item)
        if route.kind == RouteKind.SEND:
            assert item.text is not None
            await self.send_text(item.text)
        elif route.kind == RouteKind.FRAME:
            assert route.frame is not None
            await self.send_frame(route.frame)
        elif route.kind == RouteKind.RESYNC:
            assert route.replay is not None
            await self._resync(route.replay)

    async def _resync(self, replay: Replay) -> None:
        """The layer lost live chunks: send them again from the buffer, then what was held."""
        if not replay.flush:
            await self._send_replay(replay)
            return
        state = await self._state()
        if state.active_request_id == replay.request_id and not state.active_orphaned:
            await self._ask_flush(state, replay)
        else:
            await self._send_replay(replay)

    # --- flushing the writer ------------------------------------------------------------------------
    async def _ask_flush(self, state: ResumeState, replay: Replay) -> None:
        """Ask the writer to store its buffered chunks; it answers ``FLUSHED`` (``flushed()``).

        A check is scheduled too: without an answer in time, ``flush_overdue`` looks again.
        """
        if state.turn_pk is not None:
            await control.send(state.control_channel, state.turn_pk, {
                "type": handshake.FLUSH_REQUEST, "reply_to": self.channel_name, "token": replay.token,
            })
        timer = asyncio.ensure_future(self._check_later(replay.token))
        self._timers.add(timer)
        timer.add_done_callback(self._timers.discard)

    async def _check_later(self, token: str) -> None:
        await asyncio.sleep(handshake.FLUSH_REPLY_TIMEOUT_SECONDS)
        await get_channel_layer().send(self.channel_name, {"type": handshake.FLUSH_CHECK, "token": token})

    def close(self) -> None:
        for timer in list(self._timers):
            timer.cancel()

    async def flushed(self, token: str, seq: int | None = None) -> None:
        """The writer stored every chunk up to ``seq``: send the replay, then release held items."""
        replay = self.session.answered(token)
        if replay is not None:
            await self._send_replay(replay, covered=seq)

    async def flush_overdue(self, token: str) -> None:
        """No flush answer in time: the stream ended meanwhile, or its writer died."""
        replay = self.session.matches(token)
        if replay is None:
            return
        state = await self._state()
        match handshake.decide_overdue(state, replay.request_id):
            case OverdueAction.ASK_AGAIN:
                replay.renew_token()
                await self._ask_flush(state, replay)
            case OverdueAction.REPLAY_ORPHAN:
                self.session.replay = None
                await self._replay_orphan(replay.request_id)
            case OverdueAction.REPLAY_NOW:
                await self._send_replay(replay)

    async def _send_replay(self, replay: Replay, covered: int | None = None) -> None:
        stream, chunks = await self._stored(replay.request_id)
        continuation = bool(stream and stream.continuation)
        last = await self._send_all(handshake.replay_frames(replay, chunks, continuation=continuation))
        held = self.session.finish_replay(replay.from_seq - 1 if last is None else last, covered)
        # The writer answered (or the stream ended), so the stream's terminal frame has not been
        # through this connection yet: it is held, or on its way, and ends the stream for the client.
        end = handshake.replay_end(replay, continuation=continuation)
        if end is not None:
            await self.send_frame(end)
        for item in held:
            await self.deliver(item)

    async def _send_all(self, replayed: Iterable[frames.Frame]) -> int | None:
        """Send the replayed frames; the last one's ``seq`` (None: there was none)."""
        last = None
        for n, frame in enumerate(replayed, start=1):
            await self.send_frame(frame)
            last = frame["seq"]
            if n % REPLAY_YIELD_EVERY == 0:
                await asyncio.sleep(0)
        return last

    # --- replays of streams that are not live -------------------------------------------------------
    async def _stored(self, request_id: str) -> tuple[StreamRecord | None, list[tuple[int, str]]]:
        return await database_sync_to_async(buffer.read_request)(self.instance, request_id)

    async def _send_closed(self, request_id: str, stream: StreamRecord | None, chunks: list[tuple[int, str]],
                           terminal: frames.Frame, *, with_transcript: bool = False) -> None:
        """Replay ``chunks`` and end the request with ``terminal``; its late live frames are stale.

        ``with_transcript``: the stored transcript goes out before ``terminal``, as it does live
        (docs/protocol.md#normal-turn), for a connection whose ACK overtook the live end of the stream
        (whose copy of the transcript would come after ``terminal``, and is dropped as stale).
        """
        replay = Replay(request_id)
        await self._send_all(handshake.replay_frames(replay, chunks, continuation=bool(stream and stream.continuation)))
        self.session.close_request(request_id)
        if with_transcript:
            await self.send_frame(frames.chat_messages(await database_sync_to_async(transcript.load)(self.instance)))
        await self.send_frame(terminal)

    async def _replay_orphan(self, request_id: str) -> None:
        """Case 1, orphaned: replay what was stored, close it (aborted), recover its turn (golden R4)."""
        stream, chunks = await self._stored(request_id)
        continuation = bool(stream and stream.continuation)
        await self._send_closed(request_id, stream, chunks, frames.done(
            request_id=request_id, replay=True, outcome=Outcome.ABORTED, continuation=continuation))
        if stream is not None:
            await turns.recover_stream(stream.pk)

    async def _replay_terminal(self, request_id: str) -> None:
        """Case 3: a turn that failed while this client was away: its chunks, then its error."""
        stream, chunks = await self._stored(request_id)
        await database_sync_to_async(self.instance.refresh_from_db)(fields=["terminal_error"])
        await self._send_closed(request_id, stream, chunks, frames.thrown_error(
            request_id=request_id, error_text=self.instance.terminal_error or "Error"))

    async def _replay_finished(self, request_id: str, *, awaited: bool) -> None:
        """Cases 4-5, a request that is no longer streaming: the empty replayed terminal frame.

        As the reference does (docs/protocol.md#late-ack): a reply that ended normally is not replayed,
        the connection saw its end live. A stream recovery closed (its writer died) has its
        stored chunks replayed first (R2, R5): nobody saw its end.
        """
        stream, turn = await database_sync_to_async(_finished)(self.instance, request_id)
        orphaned = stream is not None and (turn is None or turn["error"] == recovery.INTERRUPTED)
        chunks = await database_sync_to_async(buffer.read)(stream) if orphaned else []
        status = turn["status"] if turn is not None else None
        terminal = frames.done(
            request_id=request_id, replay=True, continuation=bool(stream and stream.continuation),
            message_ids=turn["message_ids"] if turn is not None else None,
            outcome=Outcome.ABORTED if orphaned else _OUTCOMES.get(status),
        )
        await self._send_closed(request_id, stream, chunks, terminal, with_transcript=awaited and not orphaned)

    async def on_message(self, message: dict[str, Any]) -> None:
        """A message for this connection's handshake (the writer's answer, or our own timer)."""
        if message["type"] == handshake.FLUSHED:
            await self.flushed(message["token"], message.get("seq"))
        elif message["type"] == handshake.FLUSH_CHECK:
            await self.flush_overdue(message["token"])
