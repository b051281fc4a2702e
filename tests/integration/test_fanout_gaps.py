"""A connection that loses fan-out batches (a full channel) gets the missing chunks from the buffer.

The stream buffer is the truth and the channel layer only delivers fast (``streaming.items``):
chunks carry their index; a receiver that sees a gap asks the writer to flush and re-sends the
missing chunks as live frames, before what arrived meanwhile. A lost tail is noticed at the
terminal frame, which carries the index of the stream's last chunk.
"""

from typing import Any

import pytest

from tests.support.frames import RESP, chat_request, is_done, open_agent, receive_until, user_message
from tests.support.lossy_layer import LossyChannelLayer, carries

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def lossy(settings: Any) -> type[LossyChannelLayer]:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "tests.support.lossy_layer.LossyChannelLayer"}}
    LossyChannelLayer.reset()
    return LossyChannelLayer


def live_chunks(frames: list[dict[str, Any]], request_id: str) -> list[tuple[int, str]]:
    return [(f["seq"], f["body"]) for f in frames
            if f.get("type") == RESP and f["id"] == request_id and not f.get("done") and "seq" in f]


async def run_turn(ws: Any, lossy: type[LossyChannelLayer], path: str, rule: Any) -> tuple[list[Any], list[Any]]:
    """The sender's and the observer's frames of one turn, the observer losing what ``rule`` says."""
    sender = await open_agent(ws, path)
    observer = await open_agent(ws, path)
    victim = lossy.joined[-1]
    lossy.rules[victim] = rule
    await sender.send_json_to(chat_request("r1", [user_message("u1", "go")]))
    sent = await receive_until(sender, is_done("r1"))
    seen = await receive_until(observer, is_done("r1"))
    assert lossy.lost.get(victim), "the rule lost nothing: the test would prove nothing"
    return sent, seen


def assert_same_reply(sent: list[Any], seen: list[Any]) -> None:
    expected = live_chunks(sent, "r1")
    assert [seq for seq, _ in expected] == list(range(len(expected)))
    assert live_chunks(seen, "r1") == expected
    assert not any(f.get("replay") for f in seen)
    assert [f for f in seen if f.get("done")] == [f for f in sent if f.get("done")]


# The observer's first two chat.frames events are the sender's incoming transcript (before and
# after it is stored); the stream's batches follow, ChunkAgent's deltas 10 ms apart.
@pytest.mark.parametrize("rule", [
    lambda n, message: carries(message, '\\"type\\":\\"start\\"'),
    lambda n, message: n in {5, 8, 12},
], ids=["first-chunks", "middle"])
async def test_an_observer_missing_batches_still_gets_every_chunk_once_in_order(
        ws: Any, lossy: type[LossyChannelLayer], rule: Any) -> None:
    sent, seen = await run_turn(ws, lossy, "/agents/chunk-agent/gaps", rule)
    assert_same_reply(sent, seen)


async def test_a_lost_tail_is_sent_before_the_terminal_frame(ws: Any, lossy: type[LossyChannelLayer]) -> None:
    """TailAgent's last chunks leave in their own batch, well before its terminal frame."""
    sent, seen = await run_turn(ws, lossy, "/agents/tail-agent/tail",
                                lambda n, message: carries(message, '\\"type\\":\\"finish\\"'))
    assert_same_reply(sent, seen)
