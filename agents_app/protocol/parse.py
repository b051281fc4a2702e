"""Inbound frames: ``parse(raw)`` validates a client frame into a typed event or raises.

Unlike Cloudflare's ``parseProtocolMessage`` (which trusts casts) every field is validated here,
because a Python server must not crash on a frame a browser or script made up. Unknown extra keys
are ignored: the real client adds fields between releases.

Every decoded value (the frame, and a chat request's ``init.body``) is bounded and cleaned before
anything reads it: nesting deeper than ``MAX_DEPTH`` is refused (deep values break copies, the
channel layer's msgpack and pydantic far from here), and the characters no UTF-8 socket, JSON
column or PostgreSQL text can hold (lone UTF-16 surrogates, which JSON's ``\\ud800`` escapes can
make, and NUL) become U+FFFD wherever they are, keys included, so an echo or a write never fails.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from .types import REGENERATE_TRIGGER, SUBMIT_TRIGGER, MessageType


class ProtocolError(ValueError):
    """A client frame that cannot be acted on; becomes an error frame, never a crash."""

    def __init__(self, message: str, *, code: str = "bad_frame", request_id: str | None = None):
        super().__init__(message)
        self.code = code
        self.request_id = request_id


@dataclass(frozen=True, kw_only=True)
class ChatRequest:
    """``cf_agent_use_chat_request``: one user submit or regenerate (docs/protocol.md#chat-request)."""

    request_id: str
    messages: list[dict[str, Any]]
    trigger: str
    client_tools: list[dict[str, Any]] | None
    body: dict[str, Any] | None


@dataclass(frozen=True, kw_only=True)
class Cancel:
    """``cf_agent_chat_request_cancel``."""

    request_id: str


@dataclass(frozen=True)
class Clear:
    """``cf_agent_chat_clear``."""


@dataclass(frozen=True, kw_only=True)
class ReplaceMessages:
    """Client-pushed ``cf_agent_chat_messages`` (``setMessages``)."""

    messages: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class ResumeRequest:
    """``cf_agent_stream_resume_request``."""

    probe_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ResumeAck:
    """``cf_agent_stream_resume_ack``."""

    request_id: str


@dataclass(frozen=True, kw_only=True)
class ToolResult:
    """``cf_agent_tool_result``: the browser's answer to a client tool call (docs/protocol.md#client-tool-results)."""

    tool_call_id: str
    tool_name: str
    output: Any
    state: str = "output-available"
    error_text: str | None = None
    auto_continue: bool = False
    client_tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True, kw_only=True)
class ToolApproval:
    """``cf_agent_tool_approval``: Approve/Reject of a tool call awaiting approval."""

    tool_call_id: str
    approved: bool
    auto_continue: bool = False


@dataclass(frozen=True, kw_only=True)
class RpcCall:
    """``{"type": "rpc", "id", "method", "args"}``: a client calls a method of the agent."""

    call_id: str
    method: str
    args: list[Any] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Ignored:
    """A well-formed frame of a type this server accepts but does nothing with."""

    type: str
    extra: dict[str, Any] = field(default_factory=dict)


InboundEvent = (
    ChatRequest
    | Cancel
    | Clear
    | ReplaceMessages
    | ResumeRequest
    | ResumeAck
    | ToolResult
    | ToolApproval
    | RpcCall
    | Ignored
)


# Deepest nesting of arrays and objects accepted in a frame or in ``init.body``. Real frames nest
# under 20 levels; tool inputs and outputs get the rest.
MAX_DEPTH = 64
# What a lone surrogate or NUL becomes (the Unicode replacement character).
REPLACEMENT = "\ufffd"
_UNSAFE = re.compile("[\x00\ud800-\udfff]")
# Escapes in JSON text that decode to an unsafe character: only text that has one needs cleaning.
_UNSAFE_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def parse(raw: str | bytes, *, max_bytes: int, max_messages: int | None = None) -> InboundEvent:
    """Validate one client text frame; a chat request or ``setMessages`` may carry at most ``max_messages``.

    Raises:
        ProtocolError: the frame is too large, nested too deeply, not JSON, not an object, of an
            unknown type, carries too many messages, or misses a field the type needs. The
            message says which, for the error frame.
    """
    size = _oversize(raw, max_bytes)
    if size is not None:
        raise ProtocolError(
            f"Frame of {size} bytes exceeds the limit of {max_bytes} bytes",
            code="frame_too_large",
        )
    data = _json(raw, "Frame")
    if not isinstance(data, dict):
        raise ProtocolError("Frame must be a JSON object", code="invalid_frame")
    kind = data.get("type")
    if not isinstance(kind, str):
        raise ProtocolError("Frame has no string 'type'", code="invalid_frame")
    parser = _PARSERS.get(kind)
    if parser is None:
        raise ProtocolError(f"Unknown frame type {kind!r}", code="unknown_type")
    event = parser(data)
    carries = isinstance(event, ChatRequest | ReplaceMessages)
    if carries and max_messages is not None and len(event.messages) > max_messages:  # type: ignore[union-attr]
        raise ProtocolError(f"{len(event.messages)} messages in one request; the limit is {max_messages}",
                            code="too_many_messages", request_id=getattr(event, "request_id", None))
    return event


def _oversize(raw: str | bytes, max_bytes: int) -> int | None:
    """The frame's size in bytes as it came over the wire (UTF-8) when above ``max_bytes``, else None.

    A text frame is only encoded to measure it when it could be too large: no character takes
    more than four bytes.
    """
    if isinstance(raw, str) and len(raw) * 4 <= max_bytes:
        return None
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode())
    return size if size > max_bytes else None


def _json(raw: str | bytes, what: str, *, request_id: str | None = None) -> Any:
    """``raw`` decoded, no deeper than ``MAX_DEPTH``, its strings safe to send and store (module docstring).

    orjson reads it (a fifth to a half of ``json``'s time for a long transcript) unless it has an
    escape to clean. What orjson refuses and ``json`` reads (``NaN``, a lone surrogate), and an
    integer beyond 64 bits, which orjson reads as a float, are read by ``json``: the value is always
    the one ``json`` gives, and a refusal says what ``json`` says (docs/decisions.md#orjson-codec).
    """
    text = raw if isinstance(raw, str) else raw.decode(errors="replace")
    clean = _UNSAFE_ESCAPE.search(text) is not None
    if not clean:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            floats: list[float] = []
            if not _bounded(value, floats):
                raise _too_deep(what, request_id)
            if not any(abs(number) >= _BEYOND_INT64 for number in floats):
                return value
    try:
        value = json.loads(raw)
    except RecursionError as exc:
        raise _too_deep(what, request_id) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{what} is not valid JSON: {exc}", code="invalid_json", request_id=request_id) from exc
    if not (_cleaned_within_depth(value) if clean and isinstance(value, dict | list) else _bounded(value, [])):
        raise _too_deep(what, request_id)
    return value


# The floats orjson can make of an integer ``json`` reads exactly: those beyond a 64-bit integer.
_BEYOND_INT64 = 2.0**63


def _too_deep(what: str, request_id: str | None) -> ProtocolError:
    return ProtocolError(f"{what} is nested too deeply (the limit is {MAX_DEPTH} levels)",
                         code="too_deep", request_id=request_id)


def _safe(text: str) -> str:
    return _UNSAFE.sub(REPLACEMENT, text)


def _bounded(value: Any, floats: list[float]) -> bool:
    """Whether ``value`` nests at most ``MAX_DEPTH`` levels; its floats are added to ``floats``."""
    kind = type(value)  # ``json.loads`` and ``orjson.loads`` make exact dicts, lists and floats
    if kind is dict or kind is list:
        return _within_depth(value, 1, floats)
    if kind is float:
        floats.append(value)
    return True


def _within_depth(container: dict[str, Any] | list[Any], depth: int, floats: list[float]) -> bool:
    """Whether ``container``, at nesting level ``depth``, nests at most ``MAX_DEPTH`` levels, adding
    its floats to ``floats``: the check of every request, which has nothing to clean. Recursive,
    but never more than ``MAX_DEPTH`` calls deep; half the time of the cleaning walk."""
    if depth > MAX_DEPTH:
        return False
    for item in container.values() if type(container) is dict else container:
        kind = type(item)
        if kind is dict or kind is list:
            if not _within_depth(item, depth + 1, floats):
                return False
        elif kind is float:
            floats.append(item)
    return True


def _cleaned_within_depth(value: dict[str, Any] | list[Any]) -> bool:
    """``_within_depth``, replacing unsafe keys and strings on the way (a frame whose text has an
    escape that makes one). Iterative: it visits every value, and a recursion that went on past
    the limit would hit Python's."""
    stack: list[tuple[dict[str, Any] | list[Any], int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(container, dict):
            if any(_UNSAFE.search(key) for key in container):
                items = [(_safe(key), item) for key, item in container.items()]
                container.clear()
                container.update(items)
            entries: Any = container.items()
        else:
            entries = enumerate(container)
        for key, item in entries:
            if isinstance(item, dict | list):
                stack.append((item, depth + 1))
            elif isinstance(item, str) and _UNSAFE.search(item):
                container[key] = _safe(item)  # type: ignore[index]
    return True


def _str(data: dict[str, Any], key: str, *, kind: str, request_id: str | None = None) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ProtocolError(
            f"{kind} needs a non-empty string {key!r}", code="missing_field", request_id=request_id
        )
    return value


def _messages(value: Any, *, kind: str, request_id: str | None = None) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ProtocolError(
            f"{kind} needs a 'messages' array", code="missing_field", request_id=request_id
        )
    for message in value:
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("id"), str)
            or not message["id"]
            or message.get("role") not in ("user", "assistant", "system")
            or not isinstance(message.get("parts"), list)
        ):
            raise ProtocolError(
                "Each message needs a string 'id', a 'role' of user/assistant/system and a "
                "'parts' array",
                code="invalid_message",
                request_id=request_id,
            )
    return value


def _client_tools(value: Any, *, request_id: str | None = None) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"] for t in value
    ):
        raise ProtocolError(
            "'clientTools' must be an array of objects with a string 'name'",
            code="invalid_client_tools",
            request_id=request_id,
        )
    return value or None


def _parse_chat_request(data: dict[str, Any]) -> ChatRequest:
    kind = MessageType.USE_CHAT_REQUEST
    request_id = _str(data, "id", kind=kind)
    init = data.get("init")
    if not isinstance(init, dict):
        raise ProtocolError(f"{kind} needs an 'init' object", code="missing_field",
                            request_id=request_id)
    if str(init.get("method", "")).upper() != "POST":
        raise ProtocolError(f"{kind} init.method must be POST", code="invalid_method",
                            request_id=request_id)
    raw_body = init.get("body")
    if not isinstance(raw_body, str) or not raw_body:
        raise ProtocolError(f"{kind} needs a JSON string init.body", code="missing_field",
                            request_id=request_id)
    body = _json(raw_body, "init.body", request_id=request_id)
    if not isinstance(body, dict):
        raise ProtocolError("init.body must be a JSON object", code="invalid_frame",
                            request_id=request_id)
    messages = _messages(body.pop("messages", None), kind=kind, request_id=request_id)
    trigger = body.pop("trigger", SUBMIT_TRIGGER)
    client_tools = _client_tools(body.pop("clientTools", None), request_id=request_id)
    return ChatRequest(
        request_id=request_id,
        messages=messages,
        # Any trigger other than regenerate is a submit, as in the reference.
        trigger=REGENERATE_TRIGGER if trigger == REGENERATE_TRIGGER else SUBMIT_TRIGGER,
        client_tools=client_tools,
        body=body or None,
    )


def _parse_tool_result(data: dict[str, Any]) -> ToolResult:
    kind = MessageType.TOOL_RESULT
    state = data.get("state", "output-available")
    if state not in ("output-available", "output-error"):
        raise ProtocolError(f"{kind} state must be output-available or output-error",
                            code="invalid_frame")
    error_text = data.get("errorText")
    tool_name = data.get("toolName", "")
    return ToolResult(
        tool_call_id=_str(data, "toolCallId", kind=kind),
        tool_name=tool_name if isinstance(tool_name, str) else "",
        output=data.get("output"),
        state=state,
        error_text=error_text if isinstance(error_text, str) else None,
        auto_continue=data.get("autoContinue") is True,
        client_tools=_client_tools(data.get("clientTools")),
    )


def _parse_tool_approval(data: dict[str, Any]) -> ToolApproval:
    kind = MessageType.TOOL_APPROVAL
    approved = data.get("approved")
    if not isinstance(approved, bool):
        raise ProtocolError(f"{kind} needs a boolean 'approved'", code="missing_field")
    return ToolApproval(
        tool_call_id=_str(data, "toolCallId", kind=kind),
        approved=approved,
        auto_continue=data.get("autoContinue") is True,
    )


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _parse_rpc(data: dict[str, Any]) -> RpcCall:
    kind = MessageType.RPC
    args = data.get("args", [])
    if not isinstance(args, list):
        raise ProtocolError(f"{kind} 'args' must be an array", code="invalid_frame",
                            request_id=_optional_str(data.get("id")))
    return RpcCall(call_id=_str(data, "id", kind=kind), method=_str(data, "method", kind=kind), args=args)


_PARSERS = {
    MessageType.USE_CHAT_REQUEST: _parse_chat_request,
    MessageType.CHAT_REQUEST_CANCEL: lambda d: Cancel(
        request_id=_str(d, "id", kind=MessageType.CHAT_REQUEST_CANCEL)
    ),
    MessageType.CHAT_CLEAR: lambda d: Clear(),
    MessageType.CHAT_MESSAGES: lambda d: ReplaceMessages(
        messages=_messages(d.get("messages"), kind=MessageType.CHAT_MESSAGES)
    ),
    MessageType.STREAM_RESUME_REQUEST: lambda d: ResumeRequest(
        probe_id=_optional_str(d.get("probeId"))
    ),
    MessageType.STREAM_RESUME_ACK: lambda d: ResumeAck(
        request_id=_str(d, "id", kind=MessageType.STREAM_RESUME_ACK)
    ),
    MessageType.TOOL_RESULT: _parse_tool_result,
    MessageType.TOOL_APPROVAL: _parse_tool_approval,
    # State frames of the base Agent are accepted and ignored: this server keeps no
    # client-writable state.
    MessageType.STATE: lambda d: Ignored(type=MessageType.STATE),
    MessageType.RPC: _parse_rpc,
}
