"""The transcript's conversion to pydantic-ai messages reuses earlier exchanges' conversions
(a cache in ``agents_app.llm.ui_messages``) and must give what converting the whole transcript
at once gives, turn after turn, whatever a run does to the messages it was handed."""

import copy
import threading
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.ui.vercel_ai import VercelAIAdapter

from agents_app.llm import ui_messages


def user(mid: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": [{"type": "text", "text": text}]}


def reply(mid: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": "assistant", "parts": [{"type": "step-start"}, {"type": "text", "text": text,
                                                                              "state": "done"}]}


def tool_then_text(mid: str, call: str) -> dict[str, Any]:
    return {"id": mid, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-get_weather", "toolCallId": call, "state": "output-available",
         "input": {"city": "Oslo"}, "output": {"forecast": "rain"}},
        {"type": "step-start"},
        {"type": "text", "text": "It rains.", "state": "done"},
    ]}


def tool_last(mid: str, call: str) -> dict[str, Any]:
    """A reply that ends with a tool's output: its return and the next prompt share one request."""
    return {"id": mid, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-getBrowserInfo", "toolCallId": call, "state": "output-available", "input": {},
         "output": {"language": "nb"}},
    ]}


def system(mid: str, text: str) -> dict[str, Any]:
    return {"id": mid, "role": "system", "parts": [{"type": "text", "text": text}]}


def empty_user(mid: str) -> dict[str, Any]:
    return {"id": mid, "role": "user", "parts": []}


def _plain(messages: list[Any]) -> Any:
    """The messages as JSON without the times of their making (each conversion stamps its own)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "timestamp"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def _whole(transcript: list[dict[str, Any]]) -> Any:
    """What converting the whole transcript at once gives."""
    return _plain(ui_messages.repair_messages(_whole_messages(transcript), repair_last_response=True))


CONVERSATIONS = {
    "text": [user("u1", "hi"), reply("a1", "hello"), user("u2", "again"), reply("a2", "yes"), user("u3", "go")],
    "tools": [user("u1", "weather?"), tool_then_text("a1", "c1"), user("u2", "more"), tool_then_text("a2", "c2"),
              user("u3", "thanks")],
    "tool output last": [user("u1", "browser?"), tool_last("a1", "c1"), user("u2", "and now"), reply("a2", "ok"),
                         user("u3", "bye")],
    "every reply ends with a tool": [m for i in range(4) for m in (user(f"u{i}", f"q{i}"), tool_last(f"a{i}", f"c{i}"))]
    + [user("u9", "end")],
    "system first": [system("s1", "be brief"), user("u1", "hi"), reply("a1", "hello"), user("u2", "again")],
    "assistant first": [reply("a0", "welcome"), user("u1", "hi"), reply("a1", "hello"), user("u2", "again")],
    "empty user message": [user("u1", "hi"), reply("a1", "hello"), empty_user("u2"), reply("a2", "more"),
                           user("u3", "go")],
    "two users in a row": [user("u1", "hi"), user("u2", "there"), reply("a1", "hello"), user("u3", "go")],
}


@pytest.mark.parametrize("name", CONVERSATIONS)
async def test_each_turn_converts_as_the_whole_transcript_does(name: str) -> None:
    transcript = CONVERSATIONS[name]
    # Turn by turn, as useAgentChat re-sends it: every prefix that ends with a user message.
    for end in range(1, len(transcript) + 1):
        if transcript[end - 1]["role"] != "user":
            continue
        prefix = transcript[:end]
        for _ in range(2):  # the second time from the cache
            got = await ui_messages.model_history(prefix, repair_last_response=True)
            assert _plain(got) == _whole(prefix), (name, end)


async def test_what_a_run_sets_on_its_history_does_not_reach_the_next_turn() -> None:
    transcript = CONVERSATIONS["tools"]
    first = await ui_messages.model_history(transcript, repair_last_response=True)
    for message in first:
        message.parts = []
        message.run_id = "changed by a run"
    again = await ui_messages.model_history(transcript, repair_last_response=True)
    assert _plain(again) == _whole(transcript)


async def test_an_edited_message_is_converted_again() -> None:
    transcript = CONVERSATIONS["text"]
    await ui_messages.model_history(transcript, repair_last_response=True)
    edited = [transcript[0], reply("a1", "an edited reply"), *transcript[2:]]
    assert _plain(await ui_messages.model_history(edited, repair_last_response=True)) == _whole(edited)


async def test_the_event_loops_thread_is_never_paused_a_worker_thread_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pause (``time.sleep(0)``) lets the loop's thread take the GIL from a worker thread that
    converts a long transcript; on the loop's own thread it would hand the GIL away mid-turn."""
    paused_on: list[str] = []
    real_sleep = ui_messages.time.sleep

    def recording_sleep(seconds: float) -> None:
        paused_on.append(threading.current_thread().name)
        real_sleep(seconds)

    monkeypatch.setattr(ui_messages.time, "sleep", recording_sleep)
    short = [user(f"s{i}", f"short {i}") for i in range(3)]
    await ui_messages.model_history(short, repair_last_response=True)
    assert paused_on == []
    long = [message for i in range(ui_messages.OFF_LOOP_MESSAGES) for message in
            (user(f"l{i}", f"long {i}"), reply(f"la{i}", f"reply {i}"))]
    await ui_messages.model_history(long, repair_last_response=True)
    assert paused_on and threading.main_thread().name not in paused_on


@pytest.mark.parametrize("name", CONVERSATIONS)
def test_a_cached_message_is_copied_as_copy_copy_copies_it(name: str) -> None:
    """The cache hands out ``_copied`` messages, which assumes pydantic-ai's message classes are
    plain dataclasses: no slots and no hooks of their own that ``copy.copy`` would call."""
    for message in _whole_messages(CONVERSATIONS[name]):
        kind = type(message)
        hooks = {"__slots__", "__copy__", "__reduce__", "__reduce_ex__", "__getstate__", "__setstate__", "__new__"}
        assert not any(hooks & vars(c).keys() for c in kind.__mro__ if c is not object), kind
        copied, reference = ui_messages._copied(message), copy.copy(message)
        assert type(copied) is kind and copied is not message
        assert vars(copied) == vars(reference)


def _whole_messages(transcript: list[dict[str, Any]]) -> list[Any]:
    return VercelAIAdapter.load_messages(ui_messages.for_model(transcript))


def _built_histories() -> dict[str, list[Any]]:
    """Histories built by hand, each with what sends it through pydantic-ai's repair (adjacent
    requests or responses, a call, a result), most with something the repair changes."""
    def ask(text: str) -> ModelRequest:
        return ModelRequest(parts=[UserPromptPart(text)])

    def say(text: str) -> ModelResponse:
        return ModelResponse(parts=[TextPart(text)])

    call = ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Oslo"}, tool_call_id="c1")])
    answer = ModelRequest(parts=[ToolReturnPart("get_weather", "rain", tool_call_id="c1")])
    return {
        "two requests in a row": [ask("hi"), ask("there"), say("hello"), ask("go")],
        "two made-up responses in a row": [ask("hi"), say("hello"), say("again"), ask("go")],
        "a call left unanswered mid-history": [ask("weather?"), call, ask("never mind"), say("ok"), ask("go")],
        "a call left unanswered at the end": [ask("weather?"), call],
        "a result without its call": [ask("hi"), say("hello"), answer, ask("go")],
        "a call and its result": [ask("weather?"), call, answer, say("rain"), ask("thanks")],
    }


@pytest.mark.parametrize("repair_last_response", [True, False])
def test_the_repair_is_skipped_only_where_it_changes_nothing(repair_last_response: bool) -> None:
    """``_repaired`` hands a history without tool calls or results, whose requests and responses
    alternate, back as it is; any other goes through pydantic-ai's repair. Both give what the
    repair gives."""
    histories = {name: _whole_messages(transcript) for name, transcript in CONVERSATIONS.items()}
    histories |= _built_histories()
    for name, history in histories.items():
        expected = _plain(ui_messages.repair_messages(history, repair_last_response=repair_last_response))
        assert _plain(ui_messages._repaired(list(history), repair_last_response)) == expected, name
    text = histories["text"]
    assert ui_messages._repaired(text, repair_last_response) is text
