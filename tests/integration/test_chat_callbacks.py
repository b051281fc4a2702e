"""``handle.chat(message, callback)``: a full turn streamed to callbacks, as the reference's
``StreamCallback`` (docs/architecture.md#sub-agents)."""

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async

from agents_app import AbortSignal, StreamCallback, transcript
from agents_app.demo.agents import DemoAgent
from agents_app.llm.demo import numbered_word
from tests.support.lossy_layer import LossyChannelLayer

pytestmark = pytest.mark.django_db(transaction=True)


class Recorder:
    """A callback object recording every call in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_start(self, info: dict[str, Any]) -> None:
        self.calls.append(("start", info["request_id"]))

    async def on_event(self, chunk: str) -> None:
        self.calls.append(("event", json.loads(chunk)))

    def on_done(self) -> None:
        self.calls.append(("done", None))

    def on_error(self, message: str) -> None:
        self.calls.append(("error", message))

    def on_interrupted(self) -> None:
        self.calls.append(("interrupted", None))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.calls]

    def text(self) -> str:
        return "".join(c.get("delta", "") for kind, c in self.calls if kind == "event")


async def test_chat_streams_every_chunk_in_order_between_on_start_and_on_done(user):
    child = await DemoAgent.aget("child-1", owner=user)
    recorder = Recorder()
    result = await child.chat("/burst 50", recorder)
    assert result.status == "completed"
    kinds = recorder.kinds()
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("done") == 1
    assert recorder.calls[0][1] == result.request_id
    assert set(kinds[1:-1]) == {"event"}
    assert recorder.text() == "".join(numbered_word(i) for i in range(50))
    events = [c["type"] for kind, c in recorder.calls if kind == "event"]
    assert events[0] == "start" and events[-1] == "finish"


async def test_an_error_calls_on_error_once(user):
    recorder = Recorder()
    result = await (await DemoAgent.aget("child-fail", owner=user)).chat("/fail", recorder)
    assert result.status == "error"
    assert [k for k in recorder.kinds() if k != "event"] == ["start", "error"]
    assert recorder.calls[-1][1] == "The demo model failed on purpose (/fail)."


async def test_a_cancelled_chat_calls_neither_on_done_nor_on_error_and_keeps_the_partial_reply(user):
    child = await DemoAgent.aget("child-cancel", owner=user)
    signal = AbortSignal()
    events = 0

    def on_event(chunk: str) -> None:
        nonlocal events
        events += 1
        if events == 5:
            signal.abort("enough")

    calls: list[str] = []
    callback = StreamCallback(on_start=lambda info: calls.append("start"), on_event=on_event,
                              on_done=lambda: calls.append("done"), on_error=lambda m: calls.append("error"))
    result = await child.chat("/slow 200 10", callback, signal=signal)
    assert result.status == "aborted"
    assert calls == ["start"]
    messages = await database_sync_to_async(transcript.load)(child.instance)
    assert messages[-1]["role"] == "assistant" and messages[-1]["parts"]


async def test_a_raising_callback_does_not_stop_the_turn(user):
    def explode(chunk: str) -> None:
        raise RuntimeError("callback bug")

    done: list[bool] = []
    result = await (await DemoAgent.aget("child-raise", owner=user)).chat(
        "/burst 5", StreamCallback(on_event=explode, on_done=lambda: done.append(True)))
    assert result.status == "completed"
    assert done == [True]


async def test_tools_passed_to_chat_are_ignored_with_a_warning(user):
    child = await DemoAgent.aget("child-tools", owner=user)
    with pytest.warns(UserWarning, match="tools belong to the agent"):
        result = await child.chat("hi", StreamCallback(), tools=[print])
    assert result.status == "completed"


async def test_chat_callbacks_get_every_chunk_when_the_layer_drops_batches(user, settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "tests.support.lossy_layer.LossyChannelLayer"}}
    LossyChannelLayer.reset()
    child = await DemoAgent.aget("child-lossy", owner=user)
    recorder = Recorder()

    async def lose_some_batches_of_the_follower() -> None:
        while not LossyChannelLayer.joined:
            await asyncio.sleep(0.001)
        LossyChannelLayer.rules[LossyChannelLayer.joined[0]] = lambda n, message: n in {3, 6, 9}

    rule = asyncio.ensure_future(lose_some_batches_of_the_follower())
    result = await child.chat("/slow 40 5", recorder)
    await rule
    assert result.status == "completed"
    assert LossyChannelLayer.lost
    assert recorder.text() == "".join(numbered_word(i) for i in range(40))
    assert recorder.kinds()[-1] == "done"
