"""``message_concurrency`` over real WebSockets (docs/architecture.md#message-concurrency): the cases of the
reference's ``message-concurrency.test.ts``.

The agents (``tests.agents.SlowStreamAgent`` and its subclasses) stream plain text as the request
body says and record which turns ran (``STARTED``) and what ``on_chat_response`` got
(``RESPONSES``). ``gate: true`` holds a turn open until the test releases it, so "a submit
arrives while another turn runs" holds on any machine load.
"""

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from agents_app import transcript
from agents_app.models import AgentInstance, Turn
from tests.agents import GATE, RESPONSES, STARTED, DropAgent
from tests.support.frames import RESP, chat_request, is_done, open_agent, receive_until, user_message
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = user_message("u1", "Hello")
SECOND = user_message("u2", "Second")
THIRD = user_message("u3", "Third")
# How long a test waits for the server to reach a state (seconds): generous, the machine may be busy.
PATIENCE = 15


async def turns_accepted(*request_ids: str) -> None:
    async def accepted() -> bool:
        return await Turn.objects.filter(request_id__in=request_ids).acount() == len(request_ids)

    await eventually(accepted, f"turns {request_ids} to be accepted", timeout=PATIENCE)


async def turn_started(name: str, request_id: str) -> None:
    async def started() -> bool:
        return request_id in started_ids(name)

    await eventually(started, f"{request_id} to start", timeout=PATIENCE)


def started_ids(name: str) -> list[str]:
    return [request_id for request_id, _ in STARTED.get(name, [])]


def start_time(name: str, request_id: str) -> float:
    return next(at for rid, at in STARTED[name] if rid == request_id)


def response_ids(name: str) -> list[tuple[str, str]]:
    return [(result.request_id, result.status) for result in RESPONSES.get(name, [])]


async def user_texts(slug: str, name: str) -> list[str]:
    instance = await AgentInstance.objects.aget(slug=slug, name=name)
    messages = await database_sync_to_async(transcript.load)(instance)
    return ["".join(p.get("text", "") for p in m["parts"]) for m in messages if m["role"] == "user"]


class Room:
    """One conversation of an agent class: a sender's socket and the instance's name."""

    def __init__(self, socket: WebsocketCommunicator, slug: str, name: str) -> None:
        self.socket, self.slug, self.name = socket, slug, name

    async def submit(self, request_id: str, messages: list[dict[str, Any]], **body: Any) -> None:
        await self.socket.send_json_to(chat_request(request_id, messages, **body))

    async def hold_first(self, request_id: str, messages: list[dict[str, Any]]) -> None:
        """Submit a turn that stays open (gated) until ``release()``, and wait until it runs."""
        GATE[self.name] = asyncio.Event()
        await self.submit(request_id, messages, gate=True)
        await turn_started(self.name, request_id)

    def release(self) -> None:
        GATE[self.name].set()

    async def until_done(self, request_id: str) -> list[dict[str, Any]]:
        return await receive_until(self.socket, is_done(request_id), timeout=PATIENCE)


@pytest.fixture(autouse=True)
def fresh_records() -> None:
    """Each test reads only what its own turns recorded."""
    for record in (STARTED, RESPONSES, GATE):
        record.clear()


@pytest.fixture
def room(ws: Any) -> Callable[[str, str], Any]:
    async def open_room(slug: str, name: str) -> Room:
        return Room(await open_agent(ws, f"/agents/{slug}/{name}"), slug, name)

    return open_room


def done_frame(frames: list[dict[str, Any]], request_id: str) -> dict[str, Any]:
    return next(f for f in frames if f.get("type") == RESP and f["id"] == request_id and f.get("done"))


async def run_three(room: Room, prefix: str) -> list[dict[str, Any]]:
    """req-1 runs (held), req-2 and req-3 overlap it; returns the sender's frames up to req-3's end."""
    await room.hold_first(f"{prefix}-1", [HELLO])
    await room.submit(f"{prefix}-2", [HELLO, SECOND])
    await room.submit(f"{prefix}-3", [HELLO, SECOND, THIRD])
    await turns_accepted(f"{prefix}-2", f"{prefix}-3")
    room.release()
    return await room.until_done(f"{prefix}-3")


async def test_latest_runs_only_the_newest_overlapping_submit_while_preserving_queued_user_messages(room):
    r = await room("latest-agent", "latest")
    frames = await run_three(r, "req-latest")
    assert started_ids("latest") == ["req-latest-1", "req-latest-3"]
    assert done_frame(frames, "req-latest-2")["outcome"] == "skipped"
    assert await user_texts("latest-agent", "latest") == ["Hello", "Second", "Third"]


async def test_drop_rejects_overlapping_submits_sends_rollback_state_and_never_starts_a_second_turn(room):
    r = await room("drop-agent", "drop")
    await r.hold_first("req-drop-1", [HELLO])
    await r.submit("req-drop-2", [HELLO, SECOND])
    rollback = await receive_until(r.socket, is_done("req-drop-2"), timeout=PATIENCE)
    syncs = [f for f in rollback if f["type"] == "cf_agent_chat_messages"]
    assert syncs, "the dropped sender gets the transcript to roll back to"
    assert all("Second" not in str(f["messages"]) for f in syncs)
    assert rollback[-1] == {"body": "", "done": True, "id": "req-drop-2", "type": RESP, "outcome": "skipped",
                            "messageIds": ["u1", "u2"]}
    r.release()
    await r.until_done("req-drop-1")
    assert started_ids("drop") == ["req-drop-1"]
    assert await user_texts("drop-agent", "drop") == ["Hello"]
    assert not await Turn.objects.filter(request_id="req-drop-2").aexists()


async def test_a_dropped_senders_rollback_keeps_the_reply_being_streamed(room):
    """The rollback is the transcript as it stands, the streaming partial included (``_messagesForClientSync``)."""
    r = await room("drop-agent", "drop-partial")
    await r.submit("req-1", [HELLO], chunkCount=200, chunkDelayMs=20)
    await receive_until(r.socket, lambda f: '"c12 "' in f.get("body", ""), timeout=PATIENCE)
    await r.submit("req-2", [HELLO, SECOND])
    rollback = await receive_until(r.socket, is_done("req-2"), timeout=PATIENCE)
    [sync] = [f for f in rollback if f["type"] == "cf_agent_chat_messages"]
    assert [m["role"] for m in sync["messages"]] == ["user", "assistant"]
    assert sync["messages"][1]["parts"][0]["text"].startswith("c0 c1 ")


async def test_merge_concatenates_overlapping_queued_user_messages_into_one_follow_up_turn(room):
    r = await room("merge-agent", "merge")
    await run_three(r, "req-merge")
    assert started_ids("merge") == ["req-merge-1", "req-merge-3"]
    instance = await AgentInstance.objects.aget(slug="merge-agent", name="merge")
    messages = await database_sync_to_async(transcript.load)(instance)
    users = [m for m in messages if m["role"] == "user"]
    assert [(m["id"], m["parts"]) for m in users] == [
        ("u1", [{"type": "text", "text": "Hello"}]), ("u3", [{"type": "text", "text": "Second\n\nThird"}])]


async def test_debounce_waits_for_a_quiet_period_and_then_runs_only_the_latest_submit(room):
    r = await room("debounce-agent", "debounce")
    await r.hold_first("req-debounce-1", [HELLO])
    await r.submit("req-debounce-2", [HELLO, SECOND])
    sent = time.monotonic()
    await r.submit("req-debounce-3", [HELLO, SECOND, THIRD])
    await turns_accepted("req-debounce-2", "req-debounce-3")
    r.release()
    await r.until_done("req-debounce-3")
    assert started_ids("debounce") == ["req-debounce-1", "req-debounce-3"]
    assert start_time("debounce", "req-debounce-3") - start_time("debounce", "req-debounce-1") >= 0.08
    assert start_time("debounce", "req-debounce-3") - sent >= 0.08
    assert await user_texts("debounce-agent", "debounce") == ["Hello", "Second", "Third"]


@pytest.mark.parametrize("slug", ["default-debounce-agent", "invalid-debounce-agent"], ids=["omitted", "nan"])
async def test_falls_back_to_the_default_debounce_window(room, slug):
    r = await room(slug, "window")
    await r.hold_first("req-1", [HELLO])
    sent = time.monotonic()
    await r.submit("req-2", [HELLO, SECOND])
    await turns_accepted("req-2")
    r.release()
    await r.until_done("req-2")
    assert started_ids("window")[-1] == "req-2"
    assert start_time("window", "req-2") - sent >= 0.7


async def test_applies_message_concurrency_only_to_submit_message_requests_not_regenerate(room):
    r = await room("drop-agent", "regen")
    await r.hold_first("req-regen-1", [HELLO])
    await r.submit("req-regen-2", [HELLO], trigger="regenerate-message")
    await turns_accepted("req-regen-2")
    r.release()
    await r.until_done("req-regen-2")
    assert started_ids("regen") == ["req-regen-1", "req-regen-2"]


async def test_clear_skips_queued_latest_submits_before_they_start(room, ws):
    r = await room("latest-agent", "clear")
    observer = await open_agent(ws, "/agents/latest-agent/clear")
    await r.hold_first("req-clear-1", [HELLO])
    await r.submit("req-clear-2", [HELLO, SECOND])
    await turns_accepted("req-clear-2")
    await r.socket.send_json_to({"type": "cf_agent_chat_clear"})
    await receive_until(observer, lambda f: f["type"] == "cf_agent_chat_clear", timeout=PATIENCE)
    frames = await r.until_done("req-clear-2")
    assert done_frame(frames, "req-clear-2")["outcome"] == "skipped"
    assert started_ids("clear") == ["req-clear-1"]
    assert "Second" not in await user_texts("latest-agent", "clear")


async def test_does_not_treat_post_clear_submits_as_overlapping_with_a_stale_epoch_turn(room):
    r = await room("drop-agent", "stale")
    await r.hold_first("req-clear-stale-1", [HELLO])
    await r.socket.send_json_to({"type": "cf_agent_chat_clear"})
    await r.submit("req-clear-stale-2", [SECOND])
    await r.until_done("req-clear-stale-2")
    assert started_ids("stale") == ["req-clear-stale-1", "req-clear-stale-2"]
    assert await user_texts("drop-agent", "stale") == ["Second"]
    assert await (await DropAgent.aget("stale")).wait_until_stable(timeout=PATIENCE)


@pytest.mark.parametrize(("slug", "expected"), [
    ("latest-agent", ["1", "3"]),
    ("merge-agent", ["1", "3"]),
    ("slow-stream-agent", ["1", "2", "3"]),
], ids=["latest", "merge", "queue"])
async def test_on_chat_response_fires_only_for_the_turns_that_ran(room, slug, expected):
    name = f"resp-{slug}"
    r = await room(slug, name)
    await run_three(r, "req-resp")
    await eventually(lambda: _responses_settled(name, len(expected)), "on_chat_response of every turn that ran",
                     timeout=PATIENCE)
    assert response_ids(name) == [(f"req-resp-{n}", "completed") for n in expected]


async def _responses_settled(name: str, count: int) -> bool:
    return len(RESPONSES.get(name, [])) >= count


async def test_drop_on_chat_response_fires_only_for_the_accepted_turn(room):
    r = await room("drop-agent", "resp-drop")
    await r.hold_first("req-resp-drop-1", [HELLO])
    await r.submit("req-resp-drop-2", [HELLO, SECOND])
    await receive_until(r.socket, is_done("req-resp-drop-2"), timeout=PATIENCE)
    r.release()
    await r.until_done("req-resp-drop-1")
    await eventually(lambda: _responses_settled("resp-drop", 1), "on_chat_response", timeout=PATIENCE)
    assert response_ids("resp-drop") == [("req-resp-drop-1", "completed")]
