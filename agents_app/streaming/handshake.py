"""The resume handshake's decisions (docs/protocol.md#resume-handshake).

Pure: no Django, no database, no channel layer. The driver (``agents_app.streaming.resume``) reads a
``ResumeState`` of the instance, asks these functions and one ``ResumeSession`` per connection
what to do, and does it. Connect → ``on_connect``; request → ``on_request`` (first match wins);
ACK → ``decide_ack`` (a live stream is replayed after its writer answers ``FLUSH_REQUEST`` with
``FLUSHED``; ``FLUSH_CHECK`` fires when that is late and ``decide_overdue`` says what then); live
items → ``ResumeSession.route`` (held during a replay, dropped while an ACK is awaited or already
replayed, a gap starts a resync). The end of a stream a connection has not ACKed releases it, as
the reference does (docs/protocol.md#resume-on-connect, docs/protocol.md#late-ack).
"""

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum

from ..protocol import frames
from ..protocol.types import MessageType, StreamResumeNoneReason
from .items import Event, Item

# Sent by a reader to the control channel of the turn it replays; the writer answers FLUSHED.
FLUSH_REQUEST = "stream.flush"
FLUSHED = "stream.flushed"
# Sent by a reader to itself when the writer's answer is overdue.
FLUSH_CHECK = "stream.flush_check"
# How long a reader waits for the writer's answer before looking at the database again (seconds).
FLUSH_REPLY_TIMEOUT_SECONDS = 1.0


@dataclass(frozen=True, kw_only=True)
class ResumeState:
    """What a handshake decision needs to know about the instance, read in one go."""

    # The request whose stream is still marked streaming, if any; whether its process is gone.
    active_request_id: str | None = None
    active_continuation: bool = False
    active_orphaned: bool = False
    # Where to ask the active stream's writer to flush (its turn's control channel and pk).
    control_channel: str | None = None
    turn_pk: int | None = None
    # The last turn that failed, replayed to clients that were away (ACK case 3).
    terminal_request_id: str | None = None
    # The newest queued or running turn: a connection is told to wait for it.
    pending_request_id: str | None = None
    pending_turn_pk: int = 0
    # The root request of a recovery incident being worked on (clients show "recovering…").
    recovering_request_id: str | None = None


def on_connect(state: ResumeState) -> frames.Frame | None:
    """The chat frame sent before identity: resume an active stream, keep waiting for one, or
    (between recovery attempts) say the conversation is recovering."""
    if state.active_request_id:
        return frames.stream_resuming(request_id=state.active_request_id)
    if state.pending_request_id:
        return frames.stream_pending(request_id=state.pending_request_id)
    if state.recovering_request_id:
        return frames.chat_recovering(recovering=True, request_id=state.recovering_request_id)
    return None


def on_request(state: ResumeState, probe_id: str | None) -> frames.Frame:
    """Answer to ``cf_agent_stream_resume_request``; first match wins (docs/protocol.md#resume-request)."""
    if state.active_request_id:
        return frames.stream_resuming(request_id=state.active_request_id, probe_id=probe_id)
    if state.terminal_request_id:
        return frames.stream_resuming(request_id=state.terminal_request_id, probe_id=probe_id)
    if state.pending_request_id:
        return frames.stream_pending(request_id=state.pending_request_id, probe_id=probe_id)
    return frames.stream_resume_none(reason=StreamResumeNoneReason.IDLE, probe_id=probe_id)


class AckAction(Enum):
    """What an ACK for a request leads to (docs/protocol.md#resume-ack)."""

    # A duplicate ACK (its replay is in flight), or an ACK for another request while a stream
    # runs (case 2): nothing.
    IGNORE = "ignore"
    # Case 1, live: flush the writer, replay, ``replayComplete``, then live frames.
    REPLAY_LIVE = "replay-live"
    # Case 1, orphaned: replay what was stored, close it (aborted), persist the partial reply.
    REPLAY_ORPHAN = "replay-orphan"
    # Case 3: a turn that failed while the client was away: its chunks, then its error.
    REPLAY_TERMINAL = "replay-terminal"
    # Cases 4-5: a finished buffer is replayed and closed; without one, just the close.
    REPLAY_FINISHED = "replay-finished"


def decide_ack(state: ResumeState, request_id: str) -> AckAction:
    if state.active_request_id and state.active_request_id != request_id:
        return AckAction.IGNORE
    if state.active_request_id == request_id:
        return AckAction.REPLAY_ORPHAN if state.active_orphaned else AckAction.REPLAY_LIVE
    if state.terminal_request_id == request_id:
        return AckAction.REPLAY_TERMINAL
    return AckAction.REPLAY_FINISHED


class OverdueAction(Enum):
    """What a reader does when the writer has not answered its flush request in time."""

    # The stream still runs on a live process: ask again.
    ASK_AGAIN = "ask-again"
    # The writer's process is gone: replay what was stored and close the stream.
    REPLAY_ORPHAN = "replay-orphan"
    # The stream ended meanwhile (its writer flushed everything before ending): replay now.
    REPLAY_NOW = "replay-now"


def decide_overdue(state: ResumeState, request_id: str) -> OverdueAction:
    if state.active_request_id != request_id:
        return OverdueAction.REPLAY_NOW
    return OverdueAction.REPLAY_ORPHAN if state.active_orphaned else OverdueAction.ASK_AGAIN


@dataclass
class Replay:
    """Chunks being sent from the buffer; live items of the instance are held until they are.

    A *replay* answers an ACK (frames marked ``replay``, then ``replayComplete``); a *resync*
    repairs a gap in what a live connection received (plain live frames from ``from_seq`` on).
    ``flush`` says whether the writer must store its buffered chunks first (not when the stream
    has ended: a writer flushes before its terminal frame).
    """

    request_id: str
    resync: bool = False
    from_seq: int = 0
    flush: bool = True
    # The last chunk index known to exist when the replay starts (a terminal frame's last_seq).
    covers: int = -1
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    held: list[Item] = field(default_factory=list)
    # The tokens of this replay's earlier flush requests: a late answer to one is as good as the
    # answer to the last (every request was sent after the replay began holding live items).
    asked: set[str] = field(default_factory=set)

    def renew_token(self) -> str:
        """A new token for asking again; the answer to an earlier request is still taken."""
        self.asked.add(self.token)
        self.token = uuid.uuid4().hex
        return self.token


class RouteKind(Enum):
    """What to do with one live item for one connection."""

    NOTHING = "nothing"  # dropped, or held for after a replay
    SEND = "send"  # send ``item.text`` as is
    FRAME = "frame"  # send ``Route.frame`` (a handshake frame made for this connection)
    RESYNC = "resync"  # a gap: re-send ``Route.replay``'s chunks from the buffer (the item is held)


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    frame: frames.Frame | None = None
    replay: Replay | None = None


_NOTHING = Route(RouteKind.NOTHING)
_SEND = Route(RouteKind.SEND)


class ResumeSession:
    """One connection's side of the handshake: what it was told, and what it has received.

    Invariants: while ``awaiting_ack`` is set the connection gets no live item (as the reference
    server adds pending-resume connections to every broadcast's exclusions) but the end of the
    awaited stream, which releases it (as the reference empties that set); while ``replay`` is
    set every live item is held, and released after the replayed chunks minus those the replay
    already sent (by ``seq``); ``next_seq[request_id]`` is the chunk index the connection must
    get next from a live stream, and an item past it means the layer lost some.
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
        # Requests whose end released this connection from waiting for its ACK: the end goes out
        # as it comes (the connection has no position in their chunks, so no resync).
        self.released: set[str] = set()
        self.next_seq: dict[str, int] = {}
        # Whether chunks or the end of any stream went through this connection: one that has had
        # none may lack the end of the reply a continuation extends (``needs_base``).
        self.followed = False

    def needs_base(self) -> bool:
        """The replay of a live continuation starts with the stored transcript for a connection
        that has followed no stream (docs/protocol.md#replay)."""
        return not self.followed

    def note_sent(self, frame: frames.Frame | None, pending_turn_pk: int = 0) -> None:
        """Record what a handshake frame we sent obliges us to."""
        if frame is None:
            return
        if frame["type"] == MessageType.STREAM_RESUMING:
            self.awaiting_ack, self.parked = frame["id"], False
        elif frame["type"] == MessageType.STREAM_PENDING:
            self.parked, self.parked_turn_pk = True, pending_turn_pk

    def acked(self, request_id: str) -> bool:
        """An ACK arrived; False when it repeats one whose replay is still in flight."""
        if self.awaiting_ack == request_id:
            self.awaiting_ack = None
        return not (self.replay is not None and self.replay.request_id == request_id)

    # --- live items -------------------------------------------------------------------------------
    def route(self, item: Item) -> Route:
        """Decide what one live item does for this connection (and remember what it implies)."""
        if item.request_id in self.closed or (item.lead is not None and item.lead in self.closed):
            return _NOTHING
        if item.event is not None:
            return self._route_event(item)
        if self.replay is not None:
            self.replay.held.append(item)
            return _NOTHING
        if self.awaiting_ack:
            if item.request_id != self.awaiting_ack or item.seq is not None:
                return _NOTHING
            self.awaiting_ack = None  # the awaited stream ends: released (module docstring)
            self.released.add(item.request_id)
        if item.request_id is None:
            return _SEND
        self.followed = True
        if item.request_id in self.released:
            return _SEND
        if item.seq is not None:
            return self._route_chunk(item, item.request_id, item.seq)
        if item.last_seq is not None:
            return self._route_terminal(item, item.request_id, item.last_seq)
        return _SEND

    def _route_event(self, item: Item) -> Route:
        if item.event == Event.STREAM_START and item.request_id is not None:
            self.next_seq[item.request_id] = 0
            if self.parked:
                frame = frames.stream_resuming(request_id=item.request_id)
                self.note_sent(frame)
                return Route(RouteKind.FRAME, frame=frame)
        elif item.event == Event.TURNS_IDLE and self.parked and item.turn >= self.parked_turn_pk:
            self.parked = False
            return Route(RouteKind.FRAME, frame=frames.stream_resume_none(reason=StreamResumeNoneReason.IDLE))
        return _NOTHING

    # A connection that is not waiting for its ACK was in the group when the stream started (a
    # later one is told ``resuming`` and gets a replay first), so a stream it has no position in
    # starts at chunk 0 for it: seeing a later chunk first means the layer lost the start.
    def _route_chunk(self, item: Item, request_id: str, seq: int) -> Route:
        if self.replayed is not None and self.replayed[0] == request_id and seq <= self.replayed[1]:
            return _NOTHING  # the replay sent it already
        expected = self.next_seq.get(request_id, 0)
        if seq > expected:
            return self._resync(item, request_id, expected, flush=True)
        self.next_seq[request_id] = max(expected, seq + 1)
        return _SEND

    def _route_terminal(self, item: Item, request_id: str, last_seq: int) -> Route:
        expected = self.next_seq.get(request_id, 0)
        if last_seq >= expected:
            return self._resync(item, request_id, expected, flush=False, covers=last_seq)
        self.next_seq.pop(request_id, None)
        # Over for this connection: chunks of it still on their way (a turn cut into recovery while
        # alive goes on streaming until it hears of the cut) are stale.
        self.closed.add(request_id)
        return _SEND

    def _resync(self, item: Item, request_id: str, from_seq: int, *, flush: bool, covers: int = -1) -> Route:
        self.replay = Replay(request_id, resync=True, from_seq=from_seq, flush=flush, covers=covers, held=[item])
        return Route(RouteKind.RESYNC, replay=self.replay)

    # --- replays ----------------------------------------------------------------------------------
    def start_replay(self, request_id: str) -> Replay:
        """An ACK for a live stream: hold live items until its stored chunks are sent."""
        self.awaiting_ack = None
        self.replay = Replay(request_id)
        return self.replay

    def close_request(self, request_id: str) -> None:
        """The connection has this request's end: a replay's own terminal frame, or a transcript
        that holds the reply (``ResumeDriver.send_transcript``). Every frame of its turn still on
        its way, the ones that led it included, is stale."""
        self.followed = True
        self.closed.add(request_id)
        self.released.discard(request_id)
        self.next_seq.pop(request_id, None)

    def finish_replay(self, last_sent: int, covered: int | None = None) -> list[Item]:
        """End the replay; returns the held items, to be routed again in order.

        ``last_sent`` is the index of the last chunk sent from the buffer, ``covered`` the last
        index the writer had produced when it flushed (higher when the tail was transient, i.e.
        never stored); live chunks up to ``last_sent`` are dropped as already sent.
        """
        replay, self.replay = self.replay, None
        if replay is None:
            return []
        self.followed = True
        self.replayed = (replay.request_id, last_sent)
        following = max(last_sent, replay.covers, -1 if covered is None else covered) + 1
        if replay.resync and last_sent < replay.from_seq:
            # The buffer had nothing of the gap, even after the writer's flush: those chunks were
            # never stored (a turn cut while alive: the cut closed its buffer). The stream goes on
            # from the first held chunk instead of resyncing again, forever. A resync that filled
            # some of the gap resyncs again for the rest, if any.
            following = min((i.seq for i in replay.held if i.request_id == replay.request_id
                             and i.seq is not None and i.seq >= following), default=following)
        self.next_seq[replay.request_id] = following
        return replay.held

    def matches(self, token: str) -> Replay | None:
        """The replay in flight that an overdue check with ``token`` is for (its last request's)."""
        return self.replay if self.replay is not None and self.replay.token == token else None

    def answered(self, token: str) -> Replay | None:
        """The replay in flight that a flush answer with ``token`` is for: to its last request or,
        late, to an earlier one (docs/protocol.md#replay)."""
        replay = self.replay
        if replay is not None and (replay.token == token or token in replay.asked):
            return replay
        return None


def replay_frames(replay: Replay, chunks: list[tuple[int, str]], *, continuation: bool) -> Iterator[frames.Frame]:
    """The frames that send ``chunks`` (index, body) for ``replay``: replayed, or live for a resync.

    Made one by one as they are sent: the first leaves before the last is made (2,000 took 1 ms).
    """
    return (
        frames.chunk(request_id=replay.request_id, body=body, seq=index, continuation=continuation,
                     replay=not replay.resync)
        for index, body in chunks
        if index >= replay.from_seq
    )


def replay_end(replay: Replay, *, continuation: bool) -> frames.Frame | None:
    """The frame that ends a replay of a live stream (``replayComplete``); none after a resync."""
    if replay.resync:
        return None
    return frames.replay_complete(request_id=replay.request_id, continuation=continuation)

