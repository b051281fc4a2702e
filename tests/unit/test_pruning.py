"""``prune_messages`` against the AI SDK's documented ``pruneMessages`` options (docs/architecture.md#pruning)."""

from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from agents_app.pruning import prune_messages


def conversation() -> list[ModelMessage]:
    """Two user turns: the first read a file and searched (one retry), the second searched again."""
    return [
        ModelRequest(parts=[UserPromptPart("find the bug")]),
        ModelResponse(parts=[ThinkingPart("plan"), ToolCallPart("read_file", {"path": "a"}, tool_call_id="c1"),
                             ToolCallPart("search", {"q": "x"}, tool_call_id="c2")]),
        ModelRequest(parts=[ToolReturnPart("read_file", "contents", tool_call_id="c1"),
                            ToolReturnPart("search", "bad query", tool_call_id="c2", outcome="retried")]),
        ModelResponse(parts=[ThinkingPart("found it"), TextPart("It is in a.")]),
        ModelRequest(parts=[UserPromptPart("and b?")]),
        ModelResponse(parts=[ThinkingPart("look"), ToolCallPart("search", {"q": "b"}, tool_call_id="c3")]),
        ModelRequest(parts=[ToolReturnPart("search", "b is fine", tool_call_id="c3")]),
    ]


def kinds(messages: list[ModelMessage]) -> list[list[str]]:
    """Each message's parts as ``kind[:tool call id]``: what survived, in order."""
    def label(part: Any) -> str:
        call = getattr(part, "tool_call_id", None)
        return f"{part.part_kind}:{call}" if getattr(part, "tool_name", None) else part.part_kind
    return [[label(part) for part in message.parts] for message in messages]


def test_the_defaults_prune_nothing() -> None:
    """By default no reasoning and no tool call is dropped (and so no message is left empty)."""
    messages = conversation()
    assert prune_messages(messages) == messages


def test_reasoning_all_drops_every_thinking_part_and_before_last_message_spares_the_last() -> None:
    """Reasoning can be dropped from every assistant message, or from all but the last message."""
    everything = prune_messages(conversation(), reasoning="all")
    assert not any(p.part_kind == "thinking" for m in everything for p in m.parts)
    messages = conversation()[:6]
    spared = prune_messages(messages, reasoning="before-last-message")
    assert kinds(spared)[5] == ["thinking", "tool-call:c3"]
    assert kinds(spared)[1] == ["tool-call:c1", "tool-call:c2"] and kinds(spared)[3] == ["text"]


def test_tool_calls_before_the_last_n_messages_are_dropped_with_their_results() -> None:
    """``before-last-N-messages`` drops tool calls and their results outside the last N messages; a message
    left empty is removed, and a call whose result is kept is kept too, so the pair stays whole.
    """
    pruned = prune_messages(conversation(), tool_calls="before-last-2-messages")
    assert kinds(pruned) == [
        ["user-prompt"], ["thinking"], ["thinking", "text"], ["user-prompt"], ["thinking", "tool-call:c3"],
        ["tool-return:c3"],
    ]
    # c3's call is in the second last message: with only the last one kept, it is kept for its result.
    assert kinds(prune_messages(conversation(), tool_calls="before-last-message"))[-2:] == [
        ["thinking", "tool-call:c3"], ["tool-return:c3"]]


def test_tool_calls_all_drops_every_tool_part_and_before_last_0_messages_drops_none() -> None:
    """``"all"`` drops every tool call and result; ``before-last-0-messages`` prunes nothing (as the
    SDK's ``slice(-0)``), and neither does ``"none"``."""
    pruned = prune_messages(conversation(), tool_calls="all")
    assert not any(getattr(p, "tool_name", None) for m in pruned for p in m.parts)
    messages = conversation()
    assert prune_messages(messages, tool_calls="before-last-0-messages") == messages
    assert prune_messages(messages, tool_calls="none") == messages


def test_a_rule_may_name_the_tools_it_prunes() -> None:
    """The list form applies each rule only to the tools it names, so other tools' results survive."""
    pruned = prune_messages(conversation(), tool_calls=[{"type": "before-last-2-messages", "tools": ["read_file"]}])
    assert kinds(pruned)[1:3] == [["thinking", "tool-call:c2"], ["tool-return:c2"]]
    both = prune_messages(conversation(), tool_calls=[{"type": "all", "tools": ["search"]},
                                                      {"type": "before-last-2-messages", "tools": ["read_file"]}])
    assert kinds(both) == [["user-prompt"], ["thinking"], ["thinking", "text"], ["user-prompt"], ["thinking"]]


@pytest.mark.filterwarnings("ignore:`RetryPromptPart` is deprecated")
def test_a_retry_prompt_for_a_pruned_call_goes_with_it() -> None:
    """A retry sent back for a call (bad arguments, or the tool asked for one) is that call's result:
    pruning the call drops it too, or the provider would get an answer to a call it never made. A
    retry of the final output (no tool name) belongs to no call and stays. pydantic-ai now writes
    retries as ``ToolReturnPart(outcome="retried")``, but histories may still hold the older part."""
    messages = [
        ModelRequest(parts=[UserPromptPart("find it")]),
        ModelResponse(parts=[ToolCallPart("search", {"q": 1}, tool_call_id="c1")]),
        ModelRequest(parts=[RetryPromptPart("q must be a string", tool_name="search", tool_call_id="c1")]),
        ModelResponse(parts=[ToolCallPart("search", {"q": "x"}, tool_call_id="c2")]),
        ModelRequest(parts=[ToolReturnPart("search", "found", tool_call_id="c2")]),
        ModelResponse(parts=[TextPart("not json")]),
        ModelRequest(parts=[RetryPromptPart("answer in JSON", tool_call_id="c9")]),
    ]
    pruned = prune_messages(messages, tool_calls="before-last-message")
    assert kinds(pruned) == [["user-prompt"], ["text"], ["retry-prompt"]]
    assert kinds(prune_messages(messages, tool_calls=[{"type": "all", "tools": ["search"]}]))[-1] == ["retry-prompt"]


def test_empty_messages_keep_leaves_emptied_messages_in_place() -> None:
    """``emptyMessages: "keep"`` keeps a message that pruning emptied (``"remove"``, the default, drops it)."""
    kept = prune_messages(conversation(), tool_calls="all", empty_messages="keep")
    assert len(kept) == len(conversation()) and kinds(kept)[2] == [] and kinds(kept)[6] == []


def test_a_message_empty_before_pruning_is_kept() -> None:
    """Our one departure: an empty request already there (how a run is told to go on) is not removed."""
    messages = [*conversation()[:4], ModelRequest(parts=[])]
    assert prune_messages(messages, reasoning="all")[-1] == ModelRequest(parts=[])


def test_the_input_is_not_changed() -> None:
    """Pruning returns new messages and leaves the caller's list and messages as they were."""
    messages = conversation()
    before = kinds(messages)
    prune_messages(messages, reasoning="all", tool_calls="all")
    assert kinds(messages) == before


@pytest.mark.parametrize(("options", "problem"), [
    ({"tool_calls": "before-last-two-messages"}, "a tool-call rule is"),
    ({"tool_calls": [{"type": "recent"}]}, "a tool-call rule is"),
    ({"reasoning": "some"}, "reasoning must be"),
    ({"empty_messages": "drop"}, "empty_messages must be"),
])
def test_an_unknown_rule_is_refused_by_name(options: dict[str, Any], problem: str) -> None:
    """A misspelt option is an error naming it, never silently no pruning."""
    with pytest.raises(ValueError, match=problem):
        prune_messages(conversation(), **options)
