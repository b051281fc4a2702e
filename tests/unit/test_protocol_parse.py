"""Inbound ``cf_agent_*`` frames, parsed as the real ``@cloudflare/ai-chat`` client sends them.

``protocol.parse`` is the only gate between a socket and the server: it must accept every real client frame and turn
every made-up one into a ``ProtocolError`` with a stable ``code``, never a crash.
"""

import json
from typing import Any

import pytest

from agents_app.protocol.parse import (
    _PARSERS,
    MAX_DEPTH,
    REPLACEMENT,
    Cancel,
    ChatRequest,
    Clear,
    Ignored,
    InboundEvent,
    ProtocolError,
    ReplaceMessages,
    ResumeAck,
    ResumeRequest,
    RpcCall,
    ToolApproval,
    ToolResult,
    parse,
)
from agents_app.protocol.types import REGENERATE_TRIGGER, SUBMIT_TRIGGER, MessageType
from tests.support.frames import chat_request

MAX = 64 * 1024

USER_MESSAGE: dict[str, Any] = {"parts": [{"type": "text", "text": "slow please"}], "id": "WNUyfrBOc4BcQIeO",
                                "role": "user"}
ASSISTANT_MESSAGE: dict[str, Any] = {"id": "msg_1", "role": "assistant", "metadata": {"finishReason": "stop"},
                                     "parts": [{"type": "step-start"}, {"type": "text", "text": "Hi", "state": "done"}]}
CLIENT_TOOLS: list[dict[str, Any]] = [
    {"name": "getLocation", "description": "Where the user is",
     "parameters": {"type": "object", "properties": {}}},
]


RID = "zf1bAFY-"  # the request id of the frames below that name none


def encode(frame: dict[str, Any]) -> str:
    return json.dumps(frame, separators=(",", ":"))


def chat(body: dict[str, Any]) -> ChatRequest:
    event = parse(encode(chat_request(RID, body=body)), max_bytes=MAX)
    assert isinstance(event, ChatRequest)
    return event


def refusal(raw: str | bytes, *, max_bytes: int = MAX) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse(raw, max_bytes=max_bytes)
    return caught.value


# ------------------------------------------------------------------------------------- valid frames
# One real frame per type in _PARSERS, as captured from the npm client (docs/protocol.md#client-frames).
VALID_FRAMES: list[tuple[dict[str, Any], InboundEvent]] = [
    (
        {"id": "zf1bAFY-", "type": "cf_agent_use_chat_request",
         "init": {"method": "POST", "body": encode({"messages": [USER_MESSAGE], "trigger": "submit-message"})}},
        ChatRequest(request_id="zf1bAFY-", messages=[USER_MESSAGE], trigger=SUBMIT_TRIGGER, client_tools=None,
                    body=None),
    ),
    ({"id": "HnPxMt-J", "type": "cf_agent_chat_request_cancel"}, Cancel(request_id="HnPxMt-J")),
    ({"type": "cf_agent_chat_clear"}, Clear()),
    (
        {"messages": [USER_MESSAGE, ASSISTANT_MESSAGE], "type": "cf_agent_chat_messages"},
        ReplaceMessages(messages=[USER_MESSAGE, ASSISTANT_MESSAGE]),
    ),
    ({"type": "cf_agent_stream_resume_request", "probeId": "XhJKkDjn"}, ResumeRequest(probe_id="XhJKkDjn")),
    ({"type": "cf_agent_stream_resume_ack", "id": "zf1bAFY-"}, ResumeAck(request_id="zf1bAFY-")),
    (
        {"type": "cf_agent_tool_result", "toolCallId": "call_client_1", "toolName": "getLocation",
         "output": {"city": "Lisbon"}, "autoContinue": True},
        ToolResult(tool_call_id="call_client_1", tool_name="getLocation", output={"city": "Lisbon"},
                   auto_continue=True),
    ),
    (
        {"type": "cf_agent_tool_approval", "toolCallId": "call_approve_1", "approved": True, "autoContinue": True},
        ToolApproval(tool_call_id="call_approve_1", approved=True, auto_continue=True),
    ),
    ({"type": "cf_agent_state", "state": {"count": 1}}, Ignored(type=MessageType.STATE)),
    (
        {"type": "rpc", "id": "6f1c2c1e-0000-4000-8000-000000000000", "method": "increment", "args": [1]},
        RpcCall(call_id="6f1c2c1e-0000-4000-8000-000000000000", method="increment", args=[1]),
    ),
]


def test_the_valid_frames_cover_every_parser() -> None:
    assert {frame["type"] for frame, _ in VALID_FRAMES} == set(_PARSERS)


@pytest.mark.parametrize(("frame", "expected"), VALID_FRAMES, ids=[frame["type"] for frame, _ in VALID_FRAMES])
@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "bytes"])
def test_a_real_client_frame_parses_to_its_event(frame: dict[str, Any], expected: InboundEvent,
                                                  as_bytes: bool) -> None:
    raw = encode(frame)
    assert parse(raw.encode() if as_bytes else raw, max_bytes=MAX) == expected


@pytest.mark.parametrize(("frame", "expected"), VALID_FRAMES, ids=[frame["type"] for frame, _ in VALID_FRAMES])
def test_unknown_extra_keys_are_ignored(frame: dict[str, Any], expected: InboundEvent) -> None:
    assert parse(encode({**frame, "futureField": {"x": 1}, "v": 2}), max_bytes=MAX) == expected


def test_extra_init_keys_of_request_init_are_tolerated() -> None:
    init = {"method": "POST", "body": encode({"messages": [USER_MESSAGE]}), "headers": {"x-a": "1"},
            "credentials": "include"}
    event = parse(encode(chat_request(RID, init=init)), max_bytes=MAX)
    assert isinstance(event, ChatRequest)
    assert event.messages == [USER_MESSAGE]


@pytest.mark.parametrize("method", ["POST", "post", "Post"])
def test_the_init_method_is_post_in_any_case(method: str) -> None:
    init = {"method": method, "body": encode({"messages": []})}
    assert isinstance(parse(encode(chat_request(RID, init=init)), max_bytes=MAX), ChatRequest)


# ------------------------------------------------------------------------------------ chat request body
@pytest.mark.parametrize(("body", "expected"), [
    ({"messages": [USER_MESSAGE], "trigger": SUBMIT_TRIGGER}, None),
    ({"messages": [USER_MESSAGE]}, None),
    ({"messages": [USER_MESSAGE], "trigger": SUBMIT_TRIGGER, "clientTools": CLIENT_TOOLS}, None),
    ({"messages": [USER_MESSAGE], "trigger": SUBMIT_TRIGGER, "tenant": "acme"}, {"tenant": "acme"}),
    (
        {"messages": [USER_MESSAGE], "trigger": REGENERATE_TRIGGER, "clientTools": CLIENT_TOOLS, "tenant": "acme",
         "options": {"temperature": 0.2}, "flag": None},
        {"tenant": "acme", "options": {"temperature": 0.2}, "flag": None},
    ),
])
def test_the_custom_body_is_what_remains_after_messages_trigger_and_client_tools(
    body: dict[str, Any], expected: dict[str, Any] | None
) -> None:
    assert chat(body).body == expected


@pytest.mark.parametrize(("body", "expected"), [
    ({}, SUBMIT_TRIGGER),
    ({"trigger": SUBMIT_TRIGGER}, SUBMIT_TRIGGER),
    ({"trigger": REGENERATE_TRIGGER}, REGENERATE_TRIGGER),
    ({"trigger": "Regenerate-Message"}, SUBMIT_TRIGGER),
    ({"trigger": "resume-stream"}, SUBMIT_TRIGGER),
    ({"trigger": ""}, SUBMIT_TRIGGER),
    ({"trigger": None}, SUBMIT_TRIGGER),
    ({"trigger": 7}, SUBMIT_TRIGGER),
    ({"trigger": ["regenerate-message"]}, SUBMIT_TRIGGER),
])
def test_any_trigger_but_regenerate_is_a_submit(body: dict[str, Any], expected: str) -> None:
    assert chat({"messages": [USER_MESSAGE], **body}).trigger == expected


@pytest.mark.parametrize(("body", "expected"), [
    ({}, None),
    ({"clientTools": None}, None),
    ({"clientTools": []}, None),
    ({"clientTools": CLIENT_TOOLS}, CLIENT_TOOLS),
    ({"clientTools": [{"name": "a"}, {"name": "b", "extra": True}]}, [{"name": "a"}, {"name": "b", "extra": True}]),
])
def test_client_tools_are_kept_and_an_empty_list_is_none(body: dict[str, Any], expected: Any) -> None:
    assert chat({"messages": [USER_MESSAGE], **body}).client_tools == expected


@pytest.mark.parametrize("messages", [
    [],
    [USER_MESSAGE],
    [USER_MESSAGE, ASSISTANT_MESSAGE],
    [{"id": "s1", "role": "system", "parts": []}],
])
def test_messages_of_every_role_are_kept_in_order(messages: list[dict[str, Any]]) -> None:
    assert chat({"messages": messages}).messages == messages


# ------------------------------------------------------------------------------------ tool result
@pytest.mark.parametrize(("extra", "expected"), [
    ({}, {"state": "output-available", "error_text": None}),
    ({"state": "output-available"}, {"state": "output-available", "error_text": None}),
    ({"state": "output-error", "errorText": "GPS off", "autoContinue": False},
     {"state": "output-error", "error_text": "GPS off"}),
    ({"state": "output-error"}, {"state": "output-error", "error_text": None}),
    ({"state": "output-error", "errorText": 42}, {"state": "output-error", "error_text": None}),
])
def test_a_tool_result_carries_its_state_and_error_text(extra: dict[str, Any], expected: dict[str, Any]) -> None:
    frame = {"type": "cf_agent_tool_result", "toolCallId": "call_1", "toolName": "getLocation", "output": None,
             **extra}
    event = parse(encode(frame), max_bytes=MAX)
    assert isinstance(event, ToolResult)
    assert (event.state, event.error_text) == (expected["state"], expected["error_text"])


@pytest.mark.parametrize(("extra", "expected"), [
    ({}, ("", None)),
    ({"toolName": 5}, ("", None)),
    ({"toolName": "getLocation", "output": [1, "two"]}, ("getLocation", [1, "two"])),
    ({"toolName": "getLocation", "output": "plain"}, ("getLocation", "plain")),
])
def test_a_tool_result_defaults_a_missing_name_and_keeps_any_output(extra: dict[str, Any], expected: Any) -> None:
    event = parse(encode({"type": "cf_agent_tool_result", "toolCallId": "call_1", **extra}), max_bytes=MAX)
    assert isinstance(event, ToolResult)
    assert (event.tool_name, event.output) == expected


@pytest.mark.parametrize(("client_tools", "expected"), [
    (None, None),
    ([], None),
    (CLIENT_TOOLS, CLIENT_TOOLS),
])
def test_a_tool_result_may_carry_client_tools(client_tools: Any, expected: Any) -> None:
    frame = {"type": "cf_agent_tool_result", "toolCallId": "call_1", "clientTools": client_tools}
    event = parse(encode(frame), max_bytes=MAX)
    assert isinstance(event, ToolResult)
    assert event.client_tools == expected


AUTO_CONTINUE_VALUES = [
    (True, True),
    (False, False),
    ("true", False),
    (1, False),
    (None, False),
    ({}, False),
]


@pytest.mark.parametrize("extra", [
    {"type": "cf_agent_tool_result", "toolCallId": "call_1", "output": 1},
    {"type": "cf_agent_tool_approval", "toolCallId": "call_1", "approved": True},
], ids=["tool_result", "tool_approval"])
@pytest.mark.parametrize(("value", "expected"), AUTO_CONTINUE_VALUES)
def test_auto_continue_only_when_exactly_true(extra: dict[str, Any], value: Any, expected: bool) -> None:
    event = parse(encode({**extra, "autoContinue": value}), max_bytes=MAX)
    assert isinstance(event, ToolResult | ToolApproval)
    assert event.auto_continue is expected


@pytest.mark.parametrize("frame_type", ["cf_agent_tool_result", "cf_agent_tool_approval"])
def test_auto_continue_defaults_to_false_when_absent(frame_type: str) -> None:
    event = parse(encode({"type": frame_type, "toolCallId": "call_1", "approved": False}), max_bytes=MAX)
    assert isinstance(event, ToolResult | ToolApproval)
    assert event.auto_continue is False


# ------------------------------------------------------------------------------------ approvals, resume, ignored
@pytest.mark.parametrize("approved", [True, False])
def test_an_approval_keeps_its_boolean(approved: bool) -> None:
    event = parse(encode({"type": "cf_agent_tool_approval", "toolCallId": "call_1", "approved": approved}),
                  max_bytes=MAX)
    assert event == ToolApproval(tool_call_id="call_1", approved=approved)


@pytest.mark.parametrize(("frame", "expected"), [
    ({}, None),
    ({"probeId": "XhJKkDjn"}, "XhJKkDjn"),
    ({"probeId": None}, None),
    ({"probeId": 12}, None),
    ({"probeId": ""}, ""),
])
def test_a_resume_probe_id_is_optional(frame: dict[str, Any], expected: str | None) -> None:
    event = parse(encode({"type": "cf_agent_stream_resume_request", **frame}), max_bytes=MAX)
    assert event == ResumeRequest(probe_id=expected)


@pytest.mark.parametrize(("frame", "expected"), [
    ({"type": "cf_agent_state"}, Ignored(type="cf_agent_state")),
    ({"type": "cf_agent_state", "state": None}, Ignored(type="cf_agent_state")),
])
def test_state_frames_are_ignored(frame: dict[str, Any], expected: Ignored) -> None:
    assert parse(encode(frame), max_bytes=MAX) == expected


@pytest.mark.parametrize(("frame", "expected"), [
    ({"type": "rpc", "id": "u1", "method": "ping"}, RpcCall(call_id="u1", method="ping", args=[])),
    ({"type": "rpc", "id": "u2", "method": "add", "args": [1, {"a": 2}]},
     RpcCall(call_id="u2", method="add", args=[1, {"a": 2}])),
])
def test_rpc_calls_carry_their_id_method_and_args(frame: dict[str, Any], expected: RpcCall) -> None:
    assert parse(encode(frame), max_bytes=MAX) == expected


@pytest.mark.parametrize(("frame", "code", "request_id"), [
    ({"type": "rpc"}, "missing_field", None),
    ({"type": "rpc", "id": 3, "method": "x"}, "missing_field", None),
    ({"type": "rpc", "id": "u1"}, "missing_field", None),
    ({"type": "rpc", "id": "u1", "method": "x", "args": {"a": 1}}, "invalid_frame", "u1"),
], ids=["empty", "numeric-id", "no-method", "args-object"])
def test_malformed_rpc_calls_are_refused(frame: dict[str, Any], code: str, request_id: str | None) -> None:
    error = refusal(encode(frame))
    assert (error.code, error.request_id) == (code, request_id)


# ------------------------------------------------------------------------------------ size
@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "bytes"])
def test_a_frame_at_the_limit_is_accepted_and_one_byte_more_is_refused(as_bytes: bool) -> None:
    raw = encode({"type": "cf_agent_chat_clear"})
    frame = raw.encode() if as_bytes else raw
    assert parse(frame, max_bytes=len(raw)) == Clear()
    error = refusal(frame, max_bytes=len(raw) - 1)
    assert (error.code, error.request_id) == ("frame_too_large", None)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "bytes"])
def test_a_frame_is_measured_in_utf8_bytes(as_bytes: bool) -> None:
    """The limit is in bytes on the wire: a text frame of multibyte characters counts its bytes."""
    raw = json.dumps({"type": "cf_agent_chat_clear", "note": "é" * 10}, ensure_ascii=False)  # as JSON.stringify
    frame = raw.encode() if as_bytes else raw
    size = len(raw.encode())
    assert size > len(raw)
    assert parse(frame, max_bytes=size) == Clear()
    error = refusal(frame, max_bytes=size - 1)
    assert error.code == "frame_too_large"
    assert str(error) == f"Frame of {size} bytes exceeds the limit of {size - 1} bytes"


DEEP = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)


@pytest.mark.parametrize("raw", [
    "[" * 50_000,
    encode(chat_request("r1", raw_body="[" * 50_000)),
    encode({"type": "cf_agent_state", "state": json.loads(DEEP)}),
    encode(chat_request(RID, raw_body=encode({"messages": [USER_MESSAGE], "extra": json.loads(DEEP)}))),
], ids=["frame-recursion", "init-body-recursion", "frame-valid", "init-body-valid"])
def test_json_nested_too_deep_is_refused_not_a_crash(raw: str) -> None:
    error = refusal(raw, max_bytes=MAX)
    assert error.code == "too_deep"
    assert str(error).endswith(f"is nested too deeply (the limit is {MAX_DEPTH} levels)")


def test_nesting_up_to_the_limit_is_accepted() -> None:
    deep: Any = []
    for _ in range(MAX_DEPTH - 2):  # inside the frame object: MAX_DEPTH levels in all
        deep = [deep]
    assert parse(encode({"type": "cf_agent_state", "state": deep}), max_bytes=MAX) == Ignored(type="cf_agent_state")


@pytest.mark.parametrize(("escaped", "clean"), [
    ("\\ud800", REPLACEMENT),
    ("a\\udfffb", f"a{REPLACEMENT}b"),
    ("\\u0000x", f"{REPLACEMENT}x"),
    ("\\ud83d\\ude00", "\U0001f600"),  # a valid surrogate pair is one character, kept
])
def test_lone_surrogates_and_nul_become_the_replacement_character(escaped: str, clean: str) -> None:
    """Everywhere: ids echoed back (probeId), user text stored (PostgreSQL refuses NUL), keys."""
    probe = parse('{"type": "cf_agent_stream_resume_request", "probeId": "' + escaped + '"}', max_bytes=MAX)
    assert probe == ResumeRequest(probe_id=clean)
    message = {**USER_MESSAGE, "parts": [{"type": "text", "text": "@@", "k@@": 1}]}
    raw_body = encode({"messages": [message]}).replace("@@", escaped.replace("\\\\", "\\"))
    event = parse(encode(chat_request(RID, raw_body=raw_body)), max_bytes=MAX)
    assert isinstance(event, ChatRequest)
    assert event.messages[0]["parts"][0] == {"type": "text", "text": clean, f"k{clean}": 1}
    json.dumps(event.messages).encode()  # sendable as UTF-8


# Numbers as JSON text: orjson, which reads frames first, reads an integer beyond 64 bits as a
# float and refuses NaN, infinities and a float too large; the rest both libraries read alike.
NUMBERS = ["12", "-7", "2.5", "1e3", "-0.0", "9223372036854775807", "9223372036854775808", "18446744073709551615",
           "18446744073709551616", "-9223372036854775808", "-9223372036854775809",
           "123456789012345678901234567890", "1e19", "NaN", "Infinity", "-Infinity", "1e400"]


@pytest.mark.parametrize("number", NUMBERS)
def test_a_number_is_read_as_the_standard_library_reads_it(number: str) -> None:
    """In the frame (a tool's output) and in a chat request's ``init.body`` (a message's metadata)."""
    expected = json.loads(number)
    frame = '{"type":"cf_agent_tool_result","toolCallId":"c1","toolName":"t","output":[' + number + "]}"
    result = parse(frame, max_bytes=MAX)
    assert isinstance(result, ToolResult)
    message = {**USER_MESSAGE, "metadata": {"n": "@@"}}
    raw_body = encode({"messages": [message]}).replace('"@@"', number)
    request = parse(encode(chat_request(RID, raw_body=raw_body)), max_bytes=MAX)
    assert isinstance(request, ChatRequest)
    for got in (result.output[0], request.messages[0]["metadata"]["n"]):
        assert type(got) is type(expected) and repr(got) == repr(expected)


def test_a_request_may_carry_at_most_max_messages() -> None:
    raw = encode(chat_request(RID, body={"messages": [USER_MESSAGE] * 3}))
    assert isinstance(parse(raw, max_bytes=MAX, max_messages=3), ChatRequest)
    error = refusal_with(raw, max_messages=2)
    assert (error.code, error.request_id, str(error)) == (
        "too_many_messages", "zf1bAFY-", "3 messages in one request; the limit is 2")
    error = refusal_with(encode({"type": "cf_agent_chat_messages", "messages": [USER_MESSAGE] * 3}), max_messages=2)
    assert error.code == "too_many_messages"


def refusal_with(raw: str, **limits: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        parse(raw, max_bytes=MAX, **limits)
    return caught.value


def test_size_is_checked_before_json() -> None:
    assert refusal("not json at all", max_bytes=3).code == "frame_too_large"


# ------------------------------------------------------------------------------------ refusals
REFUSALS: list[tuple[str, str | bytes, str, str | None]] = [
    # (id, raw frame, code, request_id)
    ("not-json", "{nope", "invalid_json", None),
    ("empty", "", "invalid_json", None),
    ("bad-utf8-bytes", b'{"type":"\xff"}', "invalid_json", None),
    ("array", "[]", "invalid_frame", None),
    ("string", '"cf_agent_chat_clear"', "invalid_frame", None),
    ("null", "null", "invalid_frame", None),
    ("number", "3", "invalid_frame", None),
    ("no-type", "{}", "invalid_frame", None),
    ("numeric-type", encode({"type": 1}), "invalid_frame", None),
    ("null-type", encode({"type": None}), "invalid_frame", None),
    ("unknown-type", encode({"type": "cf_agent_nope"}), "unknown_type", None),
    ("server-only-type", encode({"type": "cf_agent_use_chat_response", "id": "r"}), "unknown_type", None),
    ("type-case", encode({"type": "CF_AGENT_CHAT_CLEAR"}), "unknown_type", None),
    # cf_agent_use_chat_request: before the id is known, no request_id.
    ("chat-no-id", encode(chat_request(None, [USER_MESSAGE], SUBMIT_TRIGGER)), "missing_field", None),
    ("chat-empty-id", encode(chat_request("", [USER_MESSAGE], SUBMIT_TRIGGER)), "missing_field", None),
    ("chat-numeric-id", encode(chat_request(7, [USER_MESSAGE], SUBMIT_TRIGGER)), "missing_field", None),
    # ...after it, every refusal names the request.
    ("chat-no-init", encode({"id": "r1", "type": "cf_agent_use_chat_request"}), "missing_field", "r1"),
    ("chat-init-string", encode(chat_request("r1", init="POST")), "missing_field", "r1"),
    ("chat-get", encode(chat_request("r1", init={"method": "GET", "body": "{}"})), "invalid_method", "r1"),
    ("chat-no-method", encode(chat_request("r1", init={"body": encode({"messages": []})})), "invalid_method",
     "r1"),
    ("chat-null-method", encode(chat_request("r1", init={"method": None, "body": "{}"})), "invalid_method", "r1"),
    ("chat-no-body", encode(chat_request("r1", init={"method": "POST"})), "missing_field", "r1"),
    ("chat-empty-body", encode(chat_request("r1", raw_body="")), "missing_field", "r1"),
    ("chat-object-body", encode(chat_request("r1", init={"method": "POST", "body": {"messages": []}})),
     "missing_field", "r1"),
    ("chat-body-not-json", encode(chat_request("r1", raw_body="{messages")), "invalid_json", "r1"),
    ("chat-body-array", encode(chat_request("r1", raw_body="[]")), "invalid_frame", "r1"),
    ("chat-body-null", encode(chat_request("r1", raw_body="null")), "invalid_frame", "r1"),
    ("chat-no-messages", encode(chat_request("r1", body={"trigger": SUBMIT_TRIGGER})), "missing_field", "r1"),
    ("chat-messages-object", encode(chat_request("r1", body={"messages": USER_MESSAGE})), "missing_field", "r1"),
    ("chat-message-not-object", encode(chat_request("r1", body={"messages": ["hi"]})), "invalid_message", "r1"),
    ("chat-message-no-id", encode(chat_request("r1", body={"messages": [{"role": "user", "parts": []}]})),
     "invalid_message", "r1"),
    ("chat-message-empty-id", encode(chat_request("r1", body={"messages": [{"id": "", "role": "user", "parts": []}]})),
     "invalid_message", "r1"),
    ("chat-message-bad-role", encode(chat_request("r1", body={"messages": [{"id": "m", "role": "tool", "parts": []}]})),
     "invalid_message", "r1"),
    ("chat-message-no-parts", encode(chat_request(
        "r1", body={"messages": [{"id": "m", "role": "user", "content": "hi"}]})),
     "invalid_message", "r1"),
    ("chat-message-parts-object", encode(chat_request(
        "r1", body={"messages": [{"id": "m", "role": "user", "parts": {}}]})),
     "invalid_message", "r1"),
    ("chat-second-message-bad", encode(chat_request("r1", body={"messages": [USER_MESSAGE, {"id": "m"}]})),
     "invalid_message", "r1"),
    ("chat-tools-object", encode(chat_request("r1", body={"messages": [], "clientTools": {"name": "a"}})),
     "invalid_client_tools", "r1"),
    ("chat-tools-string", encode(chat_request("r1", body={"messages": [], "clientTools": ["a"]})),
     "invalid_client_tools", "r1"),
    ("chat-tool-no-name", encode(chat_request("r1", body={"messages": [], "clientTools": [{"description": "x"}]})),
     "invalid_client_tools", "r1"),
    ("chat-tool-empty-name", encode(chat_request("r1", body={"messages": [], "clientTools": [{"name": ""}]})),
     "invalid_client_tools", "r1"),
    ("chat-tool-numeric-name", encode(chat_request(
        "r1", body={"messages": [], "clientTools": [{"name": "a"}, {"name": 1}]})),
     "invalid_client_tools", "r1"),
    # The other frames that need an id or a field.
    ("cancel-no-id", encode({"type": "cf_agent_chat_request_cancel"}), "missing_field", None),
    ("cancel-empty-id", encode({"type": "cf_agent_chat_request_cancel", "id": ""}), "missing_field", None),
    ("ack-no-id", encode({"type": "cf_agent_stream_resume_ack"}), "missing_field", None),
    ("ack-numeric-id", encode({"type": "cf_agent_stream_resume_ack", "id": 1}), "missing_field", None),
    ("messages-missing", encode({"type": "cf_agent_chat_messages"}), "missing_field", None),
    ("messages-null", encode({"type": "cf_agent_chat_messages", "messages": None}), "missing_field", None),
    ("messages-bad-message", encode({"type": "cf_agent_chat_messages", "messages": [{"id": "m", "role": "user"}]}),
     "invalid_message", None),
    ("tool-result-no-call-id", encode({"type": "cf_agent_tool_result", "toolName": "t", "output": 1}),
     "missing_field", None),
    ("tool-result-bad-state", encode({"type": "cf_agent_tool_result", "toolCallId": "c", "state": "input-available"}),
     "invalid_frame", None),
    ("tool-result-null-state", encode({"type": "cf_agent_tool_result", "toolCallId": "c", "state": None}),
     "invalid_frame", None),
    ("tool-result-bad-tools", encode({"type": "cf_agent_tool_result", "toolCallId": "c", "clientTools": [{}]}),
     "invalid_client_tools", None),
    ("approval-no-approved", encode({"type": "cf_agent_tool_approval", "toolCallId": "c"}), "missing_field", None),
    ("approval-string", encode({"type": "cf_agent_tool_approval", "toolCallId": "c", "approved": "true"}),
     "missing_field", None),
    ("approval-number", encode({"type": "cf_agent_tool_approval", "toolCallId": "c", "approved": 1}),
     "missing_field", None),
    ("approval-null", encode({"type": "cf_agent_tool_approval", "toolCallId": "c", "approved": None}),
     "missing_field", None),
    ("approval-no-call-id", encode({"type": "cf_agent_tool_approval", "approved": True}), "missing_field", None),
]


@pytest.mark.parametrize(("raw", "code", "request_id"), [row[1:] for row in REFUSALS], ids=[row[0] for row in REFUSALS])
def test_a_bad_frame_is_refused_with_its_code(raw: str | bytes, code: str, request_id: str | None) -> None:
    error = refusal(raw)
    assert (error.code, error.request_id) == (code, request_id)
    assert str(error)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["text", "bytes"])
def test_a_refusal_is_the_same_for_text_and_bytes(as_bytes: bool) -> None:
    raw = encode(chat_request("r9", body={"messages": [{"id": "m"}]}))
    error = refusal(raw.encode() if as_bytes else raw)
    assert (error.code, error.request_id) == ("invalid_message", "r9")


def test_protocol_error_is_a_value_error_with_a_default_code() -> None:
    error = ProtocolError("bad")
    assert isinstance(error, ValueError)
    assert (error.code, error.request_id, str(error)) == ("bad_frame", None, "bad")
