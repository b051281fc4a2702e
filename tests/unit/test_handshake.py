"""The resume handshake's decisions and the fan-out item, tested as the pure code they are.

``streaming.handshake`` and ``streaming.items`` import no Django (an import contract says so);
these tests drive them with plain values: no database, no channel layer, no socket.
"""

import json
from typing import Any

import pytest

from agents_app.protocol import frames
from agents_app.streaming import handshake
from agents_app.streaming.handshake import (
    AckAction,
    OverdueAction,
    Replay,
    ResumeSession,
    ResumeState,
    RouteKind,
    decide_ack,
    decide_overdue,
    on_connect,
    on_request,
)
from agents_app.streaming.items import Event, Item

LIVE = ResumeState(active_request_id="r1", control_channel="ctl", turn_pk=7, pending_request_id="r1",
                   pending_turn_pk=7)
ORPHANED = ResumeState(active_request_id="r1", active_orphaned=True)
FAILED = ResumeState(terminal_request_id="r0")
QUEUED = ResumeState(pending_request_id="r2", pending_turn_pk=9)
IDLE = ResumeState()


def chunk(seq: int, request_id: str = "r1") -> Item:
    return Item.frame(frames.chunk(request_id=request_id, body=json.dumps({"n": seq}), seq=seq),
                      request_id=request_id)


def terminal(last_seq: int, request_id: str = "r1") -> Item:
    return Item.frame(frames.done(request_id=request_id), request_id=request_id, last_seq=last_seq)


def broadcast() -> Item:
    return Item.frame(frames.chat_messages([]))


def kinds(session: ResumeSession, items: list[Item]) -> list[RouteKind]:
    return [session.route(item).kind for item in items]


# ------------------------------------------------------------------------- connect and request
@pytest.mark.parametrize(("state", "expected"), [
    (LIVE, frames.stream_resuming(request_id="r1")),
    (QUEUED, frames.stream_pending(request_id="r2")),
    (FAILED, None),
    (IDLE, None),
])
def test_on_connect_announces_an_active_or_coming_stream(state: ResumeState, expected: frames.Frame | None) -> None:
    assert on_connect(state) == expected


@pytest.mark.parametrize(("state", "expected"), [
    (LIVE, frames.stream_resuming(request_id="r1", probe_id="p")),
    (FAILED, frames.stream_resuming(request_id="r0", probe_id="p")),
    (QUEUED, frames.stream_pending(request_id="r2", probe_id="p")),
    (IDLE, frames.stream_resume_none(probe_id="p")),
])
def test_on_request_first_match_wins(state: ResumeState, expected: frames.Frame) -> None:
    assert on_request(state, "p") == expected


# ------------------------------------------------------------------------------------------ ACK
@pytest.mark.parametrize(("state", "request_id", "action"), [
    (LIVE, "r1", AckAction.REPLAY_LIVE),
    (LIVE, "other", AckAction.IGNORE),
    (ORPHANED, "r1", AckAction.REPLAY_ORPHAN),
    (FAILED, "r0", AckAction.REPLAY_TERMINAL),
    (FAILED, "r9", AckAction.REPLAY_FINISHED),
    (IDLE, "r9", AckAction.REPLAY_FINISHED),
])
def test_decide_ack_follows_the_five_cases(state: ResumeState, request_id: str, action: AckAction) -> None:
    assert decide_ack(state, request_id) == action


@pytest.mark.parametrize(("state", "action"), [
    (LIVE, OverdueAction.ASK_AGAIN),
    (ORPHANED, OverdueAction.REPLAY_ORPHAN),
    (IDLE, OverdueAction.REPLAY_NOW),
])
def test_decide_overdue(state: ResumeState, action: OverdueAction) -> None:
    assert decide_overdue(state, "r1") == action


def test_a_duplicate_ack_is_answered_by_the_replay_in_flight() -> None:
    session = ResumeSession()
    session.note_sent(frames.stream_resuming(request_id="r1"))
    assert session.acked("r1") is True
    session.start_replay("r1")
    assert session.acked("r1") is False
    assert session.acked("r2") is True


# --------------------------------------------------------------------------------- live items
def final_transcript(request_id: str = "r1") -> Item:
    return Item.frame(frames.chat_messages([]), request_id=request_id)


def test_nothing_live_but_the_end_of_the_awaited_stream_reaches_a_connection_awaiting_its_ack() -> None:
    session = ResumeSession()
    session.note_sent(frames.stream_resuming(request_id="r1"))
    assert kinds(session, [chunk(0), broadcast(), terminal(0, "r2"), final_transcript("r2")]) == [RouteKind.NOTHING] * 4
    assert session.awaiting_ack == "r1"


@pytest.mark.parametrize("end", [[final_transcript(), terminal(7)], [terminal(7)]],
                         ids=["transcript-and-terminal", "terminal-only"])
def test_the_end_of_the_awaited_stream_releases_the_connection(end: list[Item]) -> None:
    """As the reference empties its pending-resume set when a stream finishes: the end goes out live, no resync."""
    session = ResumeSession()
    session.note_sent(frames.stream_resuming(request_id="r1"))
    assert kinds(session, [chunk(6), *end, broadcast()]) == [RouteKind.NOTHING, *[RouteKind.SEND] * len(end),
                                                               RouteKind.SEND]
    assert session.awaiting_ack is None
    assert session.replay is None


def test_a_replay_holds_live_items_and_drops_those_it_sent() -> None:
    session = ResumeSession()
    replay = session.start_replay("r1")
    assert kinds(session, [chunk(3), broadcast(), chunk(4), terminal(4)]) == [RouteKind.NOTHING] * 4
    held = session.finish_replay(last_sent=3, covered=3)
    assert kinds(session, held) == [RouteKind.NOTHING, RouteKind.SEND, RouteKind.SEND, RouteKind.SEND]
    assert replay.held == held


def test_a_request_closed_by_a_replay_gets_no_late_live_frames() -> None:
    session = ResumeSession()
    session.close_request("r1")
    assert kinds(session, [chunk(5), terminal(5), chunk(0, "r2")]) == [RouteKind.NOTHING, RouteKind.NOTHING,
                                                                          RouteKind.SEND]


def test_a_transcript_that_holds_a_turns_end_supersedes_every_frame_of_that_turn() -> None:
    """A socket that adopts a new conversation is sent the stored transcript; the frames of a turn
    whose end it holds, queued meanwhile, are all older: its lead frames, start, chunks and end."""
    session = ResumeSession()
    session.close_request("r1")
    old = [Item.frame(frames.chat_messages([]), exclude=["sender"], lead="r1"),
           Item(event=Event.STREAM_START, request_id="r1"), chunk(0), chunk(1),
           Item.frame(frames.chat_messages([]), request_id="r1"), terminal(1)]
    assert kinds(session, old) == [RouteKind.NOTHING] * len(old)
    new = [Item.frame(frames.chat_messages([]), exclude=["sender"], lead="r2"), chunk(0, "r2"), terminal(0, "r2"),
           broadcast()]
    assert kinds(session, new) == [RouteKind.SEND] * len(new)


def test_a_parked_connection_resumes_the_stream_that_starts() -> None:
    session = ResumeSession()
    session.note_sent(frames.stream_pending(request_id="r1"), pending_turn_pk=7)
    route = session.route(Item(event=Event.STREAM_START, request_id="r1"))
    assert (route.kind, route.frame) == (RouteKind.FRAME, frames.stream_resuming(request_id="r1"))
    assert session.awaiting_ack == "r1"
    assert not session.parked


@pytest.mark.parametrize(("idle_turn", "answered"), [(6, False), (7, True), (8, True)])
def test_turns_idle_answers_a_parked_connection_unless_it_is_stale(idle_turn: int, answered: bool) -> None:
    session = ResumeSession()
    session.note_sent(frames.stream_pending(request_id="r1"), pending_turn_pk=7)
    route = session.route(Item(event=Event.TURNS_IDLE, turn=idle_turn))
    assert (route.frame == frames.stream_resume_none()) is answered
    assert session.parked is not answered


def test_events_are_never_sent_as_frames_to_a_connection_that_is_not_parked() -> None:
    session = ResumeSession()
    assert kinds(session, [Item(event=Event.STREAM_START, request_id="r1"), Item(event=Event.TURNS_IDLE, turn=1)]) == [
        RouteKind.NOTHING, RouteKind.NOTHING]


# ---------------------------------------------------------------------------------------- gaps
def started() -> ResumeSession:
    session = ResumeSession()
    session.route(Item(event=Event.STREAM_START, request_id="r1"))
    return session


def test_chunks_in_order_go_out() -> None:
    session = started()
    assert kinds(session, [chunk(0), chunk(1), chunk(2), terminal(2)]) == [RouteKind.SEND] * 4
    assert "r1" not in session.next_seq


def test_a_gap_in_chunk_indexes_resyncs_from_the_first_missing_chunk() -> None:
    session = started()
    assert kinds(session, [chunk(0), chunk(1)]) == [RouteKind.SEND] * 2
    route = session.route(chunk(4))
    assert route.kind == RouteKind.RESYNC
    assert route.replay is not None
    assert (route.replay.request_id, route.replay.resync, route.replay.from_seq, route.replay.flush) == (
        "r1", True, 2, True)
    # Live items wait for the resync; the chunk that showed the gap is among them.
    assert kinds(session, [chunk(5), broadcast()]) == [RouteKind.NOTHING] * 2
    held = session.finish_replay(last_sent=4, covered=5)
    assert [item.seq for item in held] == [4, 5, None]
    assert kinds(session, held) == [RouteKind.NOTHING, RouteKind.SEND, RouteKind.SEND]
    assert kinds(session, [chunk(6), terminal(6)]) == [RouteKind.SEND] * 2


def test_a_lost_tail_is_noticed_at_the_terminal_frame_without_asking_the_writer() -> None:
    session = started()
    assert kinds(session, [chunk(0)]) == [RouteKind.SEND]
    route = session.route(terminal(3))
    assert route.kind == RouteKind.RESYNC
    assert route.replay is not None
    assert (route.replay.from_seq, route.replay.flush, route.replay.covers) == (1, False, 3)
    # Even when the buffer has none of the missing chunks (they were transient), the terminal
    # frame then goes out: the resync covered everything up to the stream's last chunk.
    held = session.finish_replay(last_sent=0)
    assert kinds(session, held) == [RouteKind.SEND]


def test_transient_chunks_the_buffer_never_had_are_not_a_gap_after_a_replay() -> None:
    session = ResumeSession()
    session.start_replay("r1")
    assert kinds(session, [chunk(3), chunk(4)]) == [RouteKind.NOTHING] * 2
    # Stored up to 2; the writer had produced up to 3 (chunk 3 was transient).
    held = session.finish_replay(last_sent=2, covered=3)
    assert kinds(session, held) == [RouteKind.SEND, RouteKind.SEND]


def test_a_resync_the_buffer_cannot_fill_goes_on_from_the_first_held_chunk() -> None:
    """Chunks never stored (a turn cut while alive: the cut closed its buffer) are not asked for again."""
    session = started()
    assert kinds(session, [chunk(0), chunk(1)]) == [RouteKind.SEND] * 2
    assert session.route(chunk(6)).kind == RouteKind.RESYNC
    # The buffer had nothing past chunk 1: the held chunk 6 goes out, and what follows it.
    held = session.finish_replay(last_sent=1, covered=1)
    assert kinds(session, held) == [RouteKind.SEND]
    assert kinds(session, [chunk(7)]) == [RouteKind.SEND]


def test_a_resync_that_filled_part_of_the_gap_resyncs_again_for_the_rest() -> None:
    session = started()
    assert kinds(session, [chunk(0), chunk(1)]) == [RouteKind.SEND] * 2
    assert session.route(chunk(6)).kind == RouteKind.RESYNC
    held = session.finish_replay(last_sent=3, covered=3)
    route = session.route(held[0])
    assert route.kind == RouteKind.RESYNC
    assert route.replay is not None and route.replay.from_seq == 4


def test_chunks_of_a_request_after_its_terminal_frame_are_dropped() -> None:
    """The cut's terminal frame ended the request; its still-alive turn's late chunks are stale."""
    session = started()
    assert kinds(session, [chunk(0), chunk(1), terminal(1)]) == [RouteKind.SEND] * 3
    assert kinds(session, [chunk(3), terminal(4)]) == [RouteKind.NOTHING] * 2


def test_a_lost_stream_start_is_a_gap_from_the_first_chunk() -> None:
    """A connection not waiting for an ACK was there when the stream started: it must see chunk 0."""
    session = ResumeSession()
    route = session.route(chunk(2))
    assert route.kind == RouteKind.RESYNC
    assert route.replay is not None
    assert route.replay.from_seq == 0
    assert ResumeSession().route(terminal(2)).kind == RouteKind.RESYNC
    assert ResumeSession().route(terminal(-1)).kind == RouteKind.SEND


# ----------------------------------------------------------------------------------- frames
def test_replay_frames_are_marked_replay_and_a_resync_sends_live_frames_from_its_first_missing_chunk() -> None:
    stored = [(0, '{"n":0}'), (1, '{"n":1}'), (2, '{"n":2}')]
    replay = Replay("r1")
    assert [f.get("replay") for f in handshake.replay_frames(replay, stored, continuation=False)] == [True] * 3
    assert handshake.replay_end(replay, continuation=True) == frames.replay_complete(request_id="r1",
                                                                                      continuation=True)
    resync = Replay("r1", resync=True, from_seq=1)
    sent = list(handshake.replay_frames(resync, stored, continuation=True))
    assert sent == [frames.chunk(request_id="r1", body=body, seq=i, continuation=True) for i, body in stored[1:]]
    assert handshake.replay_end(resync, continuation=True) is None


def test_a_renewed_token_no_longer_matches_an_overdue_check_but_a_late_answer_is_taken() -> None:
    """The overdue check of an earlier request is stale; the writer's late answer to it is as good
    as the answer to the last request (docs/protocol.md#replay)."""
    session = ResumeSession()
    replay = session.start_replay("r1")
    old = replay.token
    assert session.matches(old) is replay
    replay.renew_token()
    assert session.matches(old) is None
    assert session.matches(replay.token) is replay
    assert session.answered(old) is replay
    assert session.answered(replay.token) is replay
    assert session.answered("another") is None


def test_an_answer_to_an_earlier_replay_is_not_taken_by_the_next() -> None:
    """A resync after a replay asks anew: what the first replay's writer covered may end before the gap."""
    session = ResumeSession()
    first = session.start_replay("r1")
    first_token = first.token
    first.renew_token()
    session.finish_replay(4)
    second = session.start_replay("r1")
    assert session.answered(first_token) is None
    assert session.answered(first.token) is None
    assert session.answered(second.token) is second


# ------------------------------------------------------------------------------------- items
@pytest.mark.parametrize("item", [
    chunk(3),
    terminal(-1),
    broadcast(),
    Item.frame(frames.chat_messages([]), exclude=["a", "", "b"], only="c"),
    Item(event=Event.STREAM_START, request_id="r1"),
    Item(event=Event.TURNS_IDLE, turn=12),
    Item.frame(frames.chat_messages([]), exclude=["a"], lead="r1"),
], ids=["chunk", "terminal", "broadcast", "addressed", "stream-start", "turns-idle", "lead"])
def test_items_survive_encode_and_decode(item: Item) -> None:
    encoded = item.encode()
    assert json.loads(json.dumps(encoded)) == encoded  # plain data for the channel layer
    assert Item.decode(encoded) == item


@pytest.mark.parametrize("options", [
    {"request_id": "r1"},
    {"request_id": "r1", "last_seq": -1},
    {"exclude": ["a", "", "b"], "only": "c"},
    {"exclude": ["a"], "lead": "r1"},
    {},
], ids=["live", "terminal", "addressed", "lead", "plain"])
@pytest.mark.parametrize("frame", [
    frames.chunk(request_id="r1", body="{}", seq=4),
    frames.chunk(request_id="r1", body="{}", seq=4, replay=True),
    frames.chat_messages([]),
], ids=["chunk", "replayed-chunk", "transcript"])
def test_a_publisher_queues_what_the_item_encodes_to(frame: frames.Frame, options: dict[str, Any]) -> None:
    """``frame_entry`` (a publisher's per-chunk shortcut) is the item's own encoding, nothing else."""
    entry = Item.frame_entry(frame, **options)
    assert entry == Item.decode(entry).encode()
    assert Item.decode(entry) == Item.frame(frame, **options)
    assert Item.decode(entry).seq == (None if frame.get("replay") or "seq" not in frame else frame["seq"])


def test_an_item_is_encoded_with_only_what_it_says() -> None:
    assert broadcast().encode() == {"text": frames.encode(frames.chat_messages([]))}
    assert Item.frame(frames.chunk(request_id="r1", body="{}", seq=4, replay=True)).seq is None


def test_addressing() -> None:
    item = Item.frame(frames.chat_messages([]), exclude=["sender"])
    assert item.addressed_to("other") and not item.addressed_to("sender")
    only = Item.frame(frames.chat_messages([]), only="one")
    assert only.addressed_to("one") and not only.addressed_to("two")


def test_only_a_connection_that_followed_no_stream_needs_the_transcript_before_a_continuation() -> None:
    """A continuation extends the stored last reply: a connection that saw chunks or the end of a
    stream has that reply as it went out; a new one (a client back from a stopped server) may not
    (docs/protocol.md#replay)."""
    fresh = ResumeSession()
    assert fresh.needs_base()
    fresh.route(Item(event=Event.STREAM_START, request_id="r1"))
    assert fresh.needs_base()  # a start carries nothing of the reply
    assert fresh.route(chunk(0)).kind == RouteKind.SEND
    assert not fresh.needs_base()
    replayed = ResumeSession()
    replayed.start_replay("r1")
    replayed.finish_replay(3)
    assert not replayed.needs_base()
    closed = ResumeSession()
    closed.close_request("r1")
    assert not closed.needs_base()
