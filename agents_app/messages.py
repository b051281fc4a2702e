"""UIMessages: build an assistant reply from stream chunks, and the rules of the transcript.

One builder (``MessageBuilder``) makes every reply we store: the live one, a cancelled partial and
one rebuilt from the stored chunks of a cut stream, so all three hold the same parts. It builds
parts as Cloudflare's ``AIChatAgent`` does, because clients build the same message from the same
stream and must agree with what we store; the chat page's ``message-builder.js`` is its twin, kept
equal by ``tests/unit/test_chat_js.py``. The chunks and frames are described in ``docs/protocol.md``.
"""

import copy
import secrets
import string
from collections.abc import Callable
from typing import Any, ClassVar

UIMessage = dict[str, Any]
Chunk = dict[str, Any]

TERMINAL_TOOL_STATES = frozenset({"output-available", "output-error", "output-denied"})
# Tool states a repeated approval request or denial leaves alone.
SETTLED_TOOL_STATES = TERMINAL_TOOL_STATES | {"approval-responded"}
_ID_ALPHABET = string.ascii_letters + string.digits


def new_message_id() -> str:
    """A 16-character id like the AI SDK's ``generateId()``."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(16))


def new_request_id() -> str:
    """A server-generated request id (continuations and programmatic turns; 21 chars, nanoid-like)."""
    return "".join(secrets.choice(_ID_ALPHABET + "_-") for _ in range(21))


def is_tool_part(part: dict[str, Any]) -> bool:
    kind = part.get("type", "")
    return isinstance(kind, str) and (kind.startswith("tool-") or kind == "dynamic-tool")


def tool_name(part: dict[str, Any]) -> str:
    """The tool a tool part calls: ``tool-<name>`` parts say it in their type (and, as Cloudflare
    persists them, in ``toolName``); ``dynamic-tool`` parts only in ``toolName``."""
    if part.get("type") == "dynamic-tool":
        return str(part.get("toolName", ""))
    return str(part.get("toolName") or str(part.get("type", "")).removeprefix("tool-"))


class MessageBuilder:
    """Accumulates chunks into one assistant ``UIMessage``.

    Invariant: ``message`` is always a valid UIMessage that can be persisted as a partial reply.
    """

    def __init__(self, message: UIMessage) -> None:
        self.message = message

    @classmethod
    def new(cls, message_id: str) -> "MessageBuilder":
        return cls({"id": message_id, "role": "assistant", "parts": []})

    @property
    def parts(self) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = self.message["parts"]
        return parts

    def has_content(self) -> bool:
        return any(p.get("type") != "step-start" for p in self.parts)

    def tool_part(self, tool_call_id: Any) -> dict[str, Any] | None:
        for part in self.parts:
            if is_tool_part(part) and part.get("toolCallId") == tool_call_id:
                return part
        return None

    def _last(self, kind: str) -> dict[str, Any] | None:
        for part in reversed(self.parts):
            if part.get("type") == kind:
                return part
        return None

    def apply(self, chunk: Chunk) -> None:
        """Apply one chunk with the handler ``_CHUNK_HANDLERS`` names for its type.

        A ``data-<name>`` type adds or updates a data part. Any other type (``finish``, ``finish-step``,
        ``abort``, ``error``, a provider's own, or a type that is not a string) leaves the parts
        unchanged: such chunks are still streamed, they just add nothing to the message.
        """
        kind = chunk.get("type")
        if not isinstance(kind, str):
            return
        handler = self._CHUNK_HANDLERS.get(kind)
        if handler is not None:
            handler(self, chunk)
        elif kind.startswith("data-"):
            self._apply_data(chunk)

    def _message_metadata(self, chunk: Chunk) -> None:
        self._merge_metadata(chunk.get("messageMetadata"))

    def _step_start(self, chunk: Chunk) -> None:
        self.parts.append({"type": "step-start"})

    def _text_start(self, chunk: Chunk) -> None:
        """``text-start`` and ``reasoning-start``: the part's type is the chunk type's first word."""
        part: dict[str, Any] = {"type": chunk["type"].split("-")[0], "text": "", "state": "streaming"}
        if chunk.get("providerMetadata") is not None:
            part["providerMetadata"] = chunk["providerMetadata"]
        self.parts.append(part)

    def _text_delta(self, chunk: Chunk) -> None:
        """Extends the last part of its type; a delta with no open part (never started, or ended) starts one."""
        part_type = chunk["type"].split("-")[0]
        target = self._last(part_type)
        if target is None or target.get("state") == "done":
            target = {"type": part_type, "text": "", "state": "streaming"}
            self.parts.append(target)
        target["text"] += str(chunk.get("delta", ""))

    def _text_end(self, chunk: Chunk) -> None:
        """Closes the last part of its type. Metadata sent with the end replaces the part's, as the AI
        SDK's client does: a reasoning block's signature is only known at its end, and the next request
        must send it back (docs/architecture.md#reasoning)."""
        target = self._last(chunk["type"].split("-")[0])
        if target is not None:
            target["state"] = "done"
            if chunk.get("providerMetadata") is not None:
                target["providerMetadata"] = chunk["providerMetadata"]

    def _file(self, chunk: Chunk) -> None:
        self.parts.append({"type": "file", "mediaType": chunk.get("mediaType"), "url": chunk.get("url")})

    def _source(self, chunk: Chunk) -> None:
        self.parts.append(dict(chunk.items()))

    def _tool_input_start(self, chunk: Chunk) -> None:
        if self.tool_part(chunk.get("toolCallId")) is not None:
            return
        part = {
            "type": "dynamic-tool" if chunk.get("dynamic") else f"tool-{chunk.get('toolName')}",
            "toolCallId": chunk.get("toolCallId"),
            "toolName": chunk.get("toolName"),
            "state": "input-streaming",
        }
        for key in ("providerExecuted", "title"):
            if key in chunk:
                part[key] = chunk[key]
        self.parts.append(part)

    def _tool_input_delta(self, chunk: Chunk) -> None:
        """Nothing: the input is only final at ``tool-input-available``."""

    def _tool_input_available(self, chunk: Chunk) -> None:
        part = self.tool_part(chunk.get("toolCallId"))
        raw_input = chunk.get("input")
        tool_input = raw_input if isinstance(raw_input, dict) else {}
        if part is None:
            self.parts.append(
                {
                    "type": f"tool-{chunk.get('toolName')}",
                    "toolCallId": chunk.get("toolCallId"),
                    "toolName": chunk.get("toolName"),
                    "state": "input-available",
                    "input": tool_input,
                }
            )
        elif part.get("state") == "input-streaming":
            part.update(state="input-available", input=tool_input)

    def _tool_input_error(self, chunk: Chunk) -> None:
        part = self.tool_part(chunk.get("toolCallId"))
        if part is None:
            tool = chunk.get("toolName")
            part = {"type": f"tool-{tool}", "toolCallId": chunk.get("toolCallId"), "toolName": tool}
            self.parts.append(part)
        if part.get("state") not in TERMINAL_TOOL_STATES:
            part.update(state="output-error", input=chunk.get("input"), errorText=chunk.get("errorText", ""))

    def _tool_approval_request(self, chunk: Chunk) -> None:
        part = self.tool_part(chunk.get("toolCallId"))
        if part is None or part.get("state") in SETTLED_TOOL_STATES:
            return
        approval: dict[str, Any] = {"id": chunk.get("approvalId")}
        if chunk.get("approvalDescriptor") is not None:
            approval["descriptor"] = chunk["approvalDescriptor"]
        part.update(state="approval-requested", approval=approval)

    def _tool_output_available(self, chunk: Chunk) -> None:
        """Each output replaces the last; a ``preliminary`` one (progress) marks the part, the final one not."""
        part = self.tool_part(chunk.get("toolCallId"))
        if part is None:
            return
        part.update(state="output-available", output=chunk.get("output"))
        if chunk.get("preliminary"):
            part["preliminary"] = True
        else:
            part.pop("preliminary", None)
        if chunk.get("approvalDescriptor") is not None:
            part["approvalDescriptor"] = chunk["approvalDescriptor"]

    def _tool_output_error(self, chunk: Chunk) -> None:
        part = self.tool_part(chunk.get("toolCallId"))
        if part is not None:
            part.update(state="output-error", errorText=chunk.get("errorText", ""))

    def _tool_output_denied(self, chunk: Chunk) -> None:
        part = self.tool_part(chunk.get("toolCallId"))
        if part is not None and part.get("state") not in SETTLED_TOOL_STATES:
            part["state"] = "output-denied"

    def _apply_data(self, chunk: Chunk) -> None:
        """A data part: a transient one is not kept; one with an id replaces the data of its namesake."""
        if chunk.get("transient"):
            return
        data_id = chunk.get("id")
        if data_id is not None:
            for part in self.parts:
                if part.get("type") == chunk["type"] and part.get("id") == data_id:
                    part["data"] = chunk.get("data")
                    return
        part: dict[str, Any] = {"type": chunk["type"]}
        if data_id is not None:
            part["id"] = data_id
        part["data"] = chunk.get("data")
        self.parts.append(part)

    def _merge_metadata(self, metadata: Any) -> None:
        """Shallow-merge a metadata object into the message's (anything else is ignored)."""
        if isinstance(metadata, dict):
            merged = dict(self.message.get("metadata") or {})
            merged.update(metadata)
            self.message["metadata"] = merged

    # Chunk type -> the handler that applies it; ``apply`` says what happens to the other types.
    # message-builder.js has the same table, in the same order (tests/unit/test_chat_js.py checks).
    _CHUNK_HANDLERS: ClassVar[dict[str, Callable[["MessageBuilder", Chunk], None]]] = {
        "start": _message_metadata,
        "message-metadata": _message_metadata,
        "start-step": _step_start,
        "step-start": _step_start,
        "text-start": _text_start,
        "text-delta": _text_delta,
        "text-end": _text_end,
        "reasoning-start": _text_start,
        "reasoning-delta": _text_delta,
        "reasoning-end": _text_end,
        "file": _file,
        "source-url": _source,
        "source-document": _source,
        "tool-input-start": _tool_input_start,
        "tool-input-delta": _tool_input_delta,
        "tool-input-available": _tool_input_available,
        "tool-input-error": _tool_input_error,
        "tool-approval-request": _tool_approval_request,
        "tool-output-available": _tool_output_available,
        "tool-output-error": _tool_output_error,
        "tool-output-denied": _tool_output_denied,
    }


def rewrite_finish(chunk: Chunk, default_reason: str) -> Chunk:
    """``finish{finishReason}`` → ``finish{messageMetadata:{finishReason}}`` as AIChatAgent does (#677).

    The client reads ``metadata.finishReason`` from the merged message metadata.
    """
    metadata = dict(chunk.get("messageMetadata") or {})
    metadata.setdefault("finishReason", chunk.get("finishReason") or default_reason)
    return {"type": "finish", "messageMetadata": metadata}


# How a reply's turn ended, kept in its stored ``metadata``: the terminal frame's ``outcome``
# (``error`` or ``aborted``) and, for an error, its text under the error chunk's name.
OUTCOME_KEYS = ("outcome", "errorText")


def mark_outcome(message: UIMessage, outcome: str | None, error_text: str | None = None) -> None:
    """Record in ``message``'s metadata that its turn failed or was stopped (``outcome``), or, with
    None, that it ended normally after all (a continuation finished a stopped reply).

    The terminal frame tells only the connections that were there; a reloaded page, the REST API
    and a later connection read the stored message, so the mark is stored with it.
    """
    before = message.get("metadata")
    before = before if isinstance(before, dict) else {}
    if outcome is None and not any(k in before for k in OUTCOME_KEYS):
        return  # nothing to clear: the message is left as it was
    metadata = {k: v for k, v in before.items() if k not in OUTCOME_KEYS}
    if outcome is not None:
        metadata["outcome"] = outcome
        if error_text is not None:
            metadata["errorText"] = error_text
    message["metadata"] = metadata


def request_message_ids(messages: list[UIMessage]) -> list[str]:
    """Ids of the last run of user messages (skipping a trailing reply, for continuations).

    They are the ``messageIds`` of a turn's terminal frame.
    """
    ids: list[str] = []
    for message in reversed(messages):
        if message.get("role") == "user":
            ids.append(message["id"])
        elif ids:
            break
    return list(reversed(ids))


def builder_for_reply(messages: list[UIMessage], *, continuation: bool, message_id: str) -> "MessageBuilder":
    """The builder of a turn's reply: a continuation extends the last assistant message."""
    if continuation and messages and messages[-1].get("role") == "assistant":
        return MessageBuilder(clone(messages[-1]))
    return MessageBuilder.new(message_id)


def clone(message: UIMessage) -> UIMessage:
    return copy.deepcopy(message)


# Tool-part updates the client sends (a client tool's result, an approval decision). Each returns the
# updated part, or None when the part is not in a state the update applies to.
RESULT_STATES = frozenset({"input-available", "approval-requested", "approval-responded"})
APPROVAL_STATES = frozenset({"input-available", "approval-requested"})
DEFAULT_TOOL_ERROR = "Tool execution denied by user"


def tool_result_update(
    part: dict[str, Any], output: Any, *, state: str = "output-available", error_text: str | None = None
) -> dict[str, Any] | None:
    if part.get("state") not in RESULT_STATES:
        return None
    updated = {k: v for k, v in part.items() if k not in ("output", "errorText", "preliminary")}
    if state == "output-error":
        updated.update(state="output-error", errorText=error_text or DEFAULT_TOOL_ERROR)
    else:
        updated.update(state="output-available", output=output, preliminary=False)
    return updated


def tool_approval_update(part: dict[str, Any], approved: bool) -> dict[str, Any] | None:
    if part.get("state") not in APPROVAL_STATES:
        return None
    approval = {**(part.get("approval") or {}), "approved": approved}
    approval.setdefault("id", part.get("toolCallId"))
    return {**part, "state": "approval-responded" if approved else "output-denied", "approval": approval}


def awaits_interaction(part: dict[str, Any]) -> bool:
    """A part the user still has to act on (broad, as AIChatAgent's hasPendingInteraction)."""
    return is_tool_part(part) and part.get("state") in APPROVAL_STATES


def has_incomplete_tool_batch(message: UIMessage) -> bool:
    """Some calls of the reply are answered and some still wait: continue once all are."""
    tool_parts = [p for p in message.get("parts", []) if is_tool_part(p)]
    return any(p.get("state") in SETTLED_TOOL_STATES for p in tool_parts) and any(
        awaits_interaction(p) for p in tool_parts
    )


def ready_to_continue(messages: list[UIMessage]) -> bool:
    """A continuation runs only on a reply whose calls are all answered (or none is)."""
    return bool(messages) and messages[-1].get("role") == "assistant" and not has_incomplete_tool_batch(messages[-1])


def is_replayed_chunk(chunk: Chunk, builder: "MessageBuilder") -> bool:
    """A chunk that repeats what the reply already holds (a provider replay on continuation, #1404).

    Such chunks are neither stored nor sent.
    """
    kind = chunk.get("type")
    if kind not in (
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-approval-request",
        "tool-output-denied",
    ):
        return False
    part = builder.tool_part(chunk.get("toolCallId"))
    if part is None:
        return False
    if kind == "tool-input-start":
        return True
    if kind in ("tool-input-delta", "tool-input-available"):
        return part.get("state") != "input-streaming"
    return part.get("state") in SETTLED_TOOL_STATES


# What joins the texts of user messages merged by the ``merge`` concurrency strategy.
MERGE_SEPARATOR = "\n\n"


def merge_user_messages(messages: list[UIMessage]) -> UIMessage:
    """Overlapping user messages as one (the ``merge`` concurrency strategy): their parts in order, consecutive
    texts joined by a blank line, and the last message's id and other fields."""
    parts: list[dict[str, Any]] = [dict(part) for part in messages[0].get("parts", [])]
    for message in messages[1:]:
        _append_text(parts, MERGE_SEPARATOR)
        for part in message.get("parts", []):
            if part.get("type") == "text":
                _append_text(parts, str(part.get("text", "")))
            else:
                parts.append(dict(part))
    return {**messages[-1], "parts": parts}


def _append_text(parts: list[dict[str, Any]], text: str) -> None:
    if not text:
        return
    if parts and parts[-1].get("type") == "text":
        parts[-1] = {**parts[-1], "text": str(parts[-1].get("text", "")) + text}
    else:
        parts.append({"type": "text", "text": text})


def denied_parts(message: UIMessage) -> list[dict[str, Any]]:
    """Tool parts of a reply whose approval the user rejected."""
    return [
        p
        for p in message.get("parts", [])
        if is_tool_part(p) and p.get("state") == "output-denied" and (p.get("approval") or {}).get("approved") is False
    ]
