"""``prune_messages``: the AI SDK's ``pruneMessages`` over pydantic-ai's model messages (docs/architecture.md#pruning).

What the model is sent, not what is stored: the transcript keeps every part. Use it in
``before_step`` (``agents_app.steps``) or in a pydantic-ai history processor. Pure: no Django.

The AI SDK's message list and pydantic-ai's differ in one way that matters here: the SDK has a
``tool`` message per set of tool results, pydantic-ai puts tool returns in a ``ModelRequest``
(with any user prompt of that request). "The last N messages" counts pydantic-ai's messages, and
a request is a "tool message" for the rules below whatever else it holds. Approval requests and
responses never reach pydantic-ai's messages (approvals are deferred tool results), so there is
nothing of them to prune.
"""

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Literal, NotRequired, TypeAlias, TypedDict

from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    ThinkingPart,
)

__all__ = ["PruneToolCalls", "ReasoningPruning", "ToolCallPruning", "prune_messages"]

ReasoningPruning: TypeAlias = Literal["all", "before-last-message", "none"]
# "all", "before-last-message", "before-last-<n>-messages" or "none".
ToolCallScope: TypeAlias = str
_SCOPE = re.compile(r"^(all|before-last-message|before-last-(\d+)-messages)$")


class PruneToolCalls(TypedDict):
    """One tool-call rule (the SDK's array form): which messages, and optionally only these tools."""

    type: ToolCallScope
    tools: NotRequired[Sequence[str]]


ToolCallPruning: TypeAlias = ToolCallScope | Sequence[PruneToolCalls]


def prune_messages(
    messages: Sequence[ModelMessage],
    *,
    reasoning: ReasoningPruning = "none",
    tool_calls: ToolCallPruning = (),
    empty_messages: Literal["keep", "remove"] = "remove",
) -> list[ModelMessage]:
    """``messages`` with reasoning and tool-call parts dropped by the rules; the input is not changed.

    * ``reasoning``: drop thinking parts from every response (``"all"``), from every one but the
      last message (``"before-last-message"``), or none (``"none"``, the default).
    * ``tool_calls``: ``"all"``, ``"before-last-message"``, ``"before-last-<n>-messages"`` or
      ``"none"`` (the default ``()`` is none), or a list of ``{"type": <one of those>,
      "tools": [names]}`` rules applied in order, each only to the tools it names (all without
      ``tools``). A rule drops tool calls and their results from the
      messages before the last n, except calls that a kept message still refers to, so a call and
      its result (or its retry) are kept or dropped together.
    * ``empty_messages``: ``"remove"`` (the default) drops a message that pruning left without
      parts; ``"keep"`` keeps it. A message that was empty already is kept either way: an empty
      request is how a run is told to go on (``continue_last_turn``).

    Raises ``ValueError`` for a rule it does not know, naming it.
    """
    pruned = list(messages)
    if reasoning not in ("all", "before-last-message", "none"):
        raise ValueError(f'reasoning must be "all", "before-last-message" or "none", not {reasoning!r}')
    if reasoning != "none":
        last = len(pruned) - 1 if reasoning == "before-last-message" else None
        pruned = [
            _without(message, lambda part: isinstance(part, ThinkingPart))
            if isinstance(message, ModelResponse) and index != last else message
            for index, message in enumerate(pruned)
        ]
    for rule in _rules(tool_calls):
        pruned = _prune_tool_calls(pruned, rule)
    if empty_messages not in ("keep", "remove"):
        raise ValueError(f'empty_messages must be "keep" or "remove", not {empty_messages!r}')
    if empty_messages == "remove":
        pruned = [message for message, original in zip(pruned, messages, strict=True)
                  if message.parts or not original.parts]
    return pruned


def _rules(tool_calls: ToolCallPruning) -> list[PruneToolCalls]:
    if tool_calls == "none":
        return []
    if isinstance(tool_calls, str):
        return [{"type": tool_calls}]
    return list(tool_calls)


def _kept_count(scope: str) -> int | None:
    """How many trailing messages a scope leaves alone: None for ``all``."""
    matched = _SCOPE.match(scope) if isinstance(scope, str) else None
    if matched is None:
        raise ValueError(
            f'a tool-call rule is "all", "before-last-message" or "before-last-<n>-messages", not {scope!r}'
        )
    if scope == "all":
        return None
    return 1 if scope == "before-last-message" else int(matched.group(2))


def _prune_tool_calls(messages: list[ModelMessage], rule: PruneToolCalls) -> list[ModelMessage]:
    keep_last = _kept_count(rule["type"])
    tools = rule.get("tools")
    # Messages before ``boundary`` are pruned. As the SDK's ``slice(-0)``, "before the last 0
    # messages" prunes nothing.
    boundary = len(messages) if keep_last is None else max(0, len(messages) - keep_last) if keep_last else 0
    kept_ids = {
        call_id for message in messages[boundary:] for part in message.parts
        if (call_id := _tool_call_id(part)) is not None
    }

    def drop(part: object) -> bool:
        call_id = _tool_call_id(part)
        if call_id is None or call_id in kept_ids:
            return False
        return tools is None or _tool_name(part) in tools

    return [_without(message, drop) if index < boundary else message for index, message in enumerate(messages)]


def _tool_call_id(part: object) -> str | None:
    """The call a part belongs to, when it is a tool call or a tool's result: a retry prompt sent back
    for a call (its arguments failed validation, or the tool asked for a retry) is a result too;
    one without a tool name answers the model's final output, not a call."""
    if isinstance(part, RetryPromptPart):
        return part.tool_call_id if part.tool_name is not None else None
    return part.tool_call_id if isinstance(part, BaseToolCallPart | BaseToolReturnPart) else None


def _tool_name(part: object) -> str | None:
    return getattr(part, "tool_name", None)


def _without(message: ModelMessage, drop: Callable[[object], bool]) -> ModelMessage:
    """A copy of ``message`` without the parts ``drop`` picks (the same object when none is)."""
    parts = [part for part in message.parts if not drop(part)]
    return message if len(parts) == len(message.parts) else dataclasses.replace(message, parts=parts)
