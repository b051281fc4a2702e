"""The pure parts of ``action()``: declaration, policies, envelopes, output preparation, attachments.

docs/architecture.md#actions describes them; the expected strings are copied from the reference's
tests so that a drift fails here, loudly. No database, no engine: the pipeline that applies these
is tested elsewhere.
"""

import asyncio
import dataclasses
import datetime as dt
import decimal
import enum
import json
import re
import threading
import uuid
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agents_app.actions import (
    ACTION_OUTPUT_MAX_CHARS,
    DEFAULT_ACTION_TIMEOUT_MS,
    MAX_REPLY_ATTACHMENTS_PER_TURN,
    NO_ATTACHMENTS,
    Action,
    ReplyAttachments,
    aborted_error,
    action,
    approval_descriptor,
    authorization_error,
    call_maybe_async,
    compile_actions,
    error_envelope,
    evaluate_approval,
    is_action,
    key_conflict_error,
    missing_permission_message,
    pending_error,
    prepare_output,
    resolve_idempotency_key,
    resolve_permissions,
    to_json_safe,
)
from agents_app.errors import (
    PENDING_MESSAGE,
    ActionApprovalInputError,
    ActionAuthorizationError,
    ActionError,
    ActionKeyConflict,
    ActionPendingError,
    ActionTimeoutError,
    AgentConfigurationError,
)


class EchoInput(BaseModel):
    message: str


class NoInput(BaseModel):
    pass


def echo(input: EchoInput, ctx: Any) -> str:
    return f"action echo: {input.message}"


def make(**config: Any) -> Action[Any]:
    """An echo action with ``config`` overriding the defaults."""
    return action(**{"description": "Echo a message", "input_schema": EchoInput, "execute": echo, **config})


def allow_when_hello(input: EchoInput, ctx: Any) -> bool:
    return input.message == "hello"


# --------------------------------------------------------------------------------------- declaration
@pytest.mark.parametrize(
    ("approval", "kind", "expected_kind", "approval_configured"),
    [
        (None, None, "server", False),
        (False, None, "server", True),
        (True, None, "approval-gated", True),
        (allow_when_hello, None, "approval-gated", True),
        (True, "server", "server", True),
        # An explicit approval-gated kind without a policy never prompts (docs/architecture.md#declaring-an-action).
        (None, "approval-gated", "approval-gated", False),
        (None, "durable-pause", "durable-pause", False),
        (True, "durable-pause", "durable-pause", False),
        (allow_when_hello, "durable-pause", "durable-pause", False),
    ],
)
def test_kind_inference(approval: Any, kind: Any, expected_kind: str, approval_configured: bool) -> None:
    declared = make(approval=approval, kind=kind)
    assert declared.kind == expected_kind
    assert declared.approval_configured is approval_configured


def test_durable_pause_with_approval_false_is_refused_with_the_reference_message() -> None:
    with pytest.raises(AgentConfigurationError) as named:
        make(name="pauseAction", kind="durable-pause", approval=False)
    assert str(named.value) == (
        'Action "pauseAction": kind "durable-pause" with approval: false never parks for approval, defeating the '
        'purpose. Use kind "server" for an inline action, or omit approval (or set a predicate) to gate when it parks.'
    )
    with pytest.raises(AgentConfigurationError, match=re.compile(r"durable-pause.*approval: false", re.S)) as anonymous:
        make(kind="durable-pause", approval=False)
    assert str(anonymous.value).startswith('Action "(anonymous)": ')


def test_the_client_kind_the_reference_runs_as_server_is_refused_at_definition() -> None:
    """The reference's design names a ``client`` kind, but its code runs it like a server action. We refuse it
    when the action is declared, naming what to write instead, rather than run on the server a call the
    developer meant for the browser.
    """
    with pytest.raises(AgentConfigurationError) as refused:
        make(name="remote", kind="client")
    message = str(refused.value)
    assert message.startswith('Action "remote": kind "client" is not supported') and "ClientTool" in message


def test_a_delegated_agent_action_needs_a_delegation_and_a_delegation_is_that_kind() -> None:
    """A ``delegated-agent`` action runs a sub-agent turn: declared with a function of its own it is refused (no
    silent stand-in), a ``delegate_to`` execute makes the kind without saying so, and says no other kind.
    """
    from agents_app.agent_tools import delegate_to
    from tests.agents import ChildAgent

    with pytest.raises(AgentConfigurationError, match='kind "delegated-agent" runs a sub-agent turn'):
        make(name="research", kind="delegated-agent")
    delegation = delegate_to(ChildAgent)
    assert make(execute=delegation).kind == "delegated-agent"
    assert make(execute=delegation, kind="delegated-agent", approval=True).approval_configured
    with pytest.raises(AgentConfigurationError, match='is kind "delegated-agent", not "server"'):
        make(execute=delegation, kind="server")


def test_durable_pause_without_approval_is_valid_and_always_parks() -> None:
    assert make(kind="durable-pause").kind == "durable-pause"


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"input_schema": dict}, "input_schema must be a pydantic BaseModel subclass"),
        ({"output_schema": {"type": "object"}}, "output_schema must be a pydantic BaseModel subclass"),
        ({"kind": "robot"}, "kind must be one of server, approval-gated, durable-pause, delegated-agent"),
        ({"approval_risk": "extreme"}, "approval_risk must be one of low, medium, high"),
        ({"approval": "yes"}, "approval must be True, False or a function"),
        ({"permissions": "echo:run"}, "permissions must be a list of strings"),
        ({"permissions": ["echo:run", 3]}, "permissions must be a list of strings"),
        ({"idempotency_key": ""}, "idempotency_key must be a non-empty string"),
        ({"timeout_ms": "5s"}, "timeout_ms must be a number"),
        ({"name": ""}, "name must be a non-empty string"),
        ({"execute": 42}, "execute must be callable"),
    ],
)
def test_bad_declarations_fail_when_defined(config: dict[str, Any], problem: str) -> None:
    with pytest.raises(AgentConfigurationError, match=re.escape(problem)):
        make(**{"name": "echo", **config})


def test_declaration_defaults_and_helpers() -> None:
    declared = make()
    assert declared.name is None
    assert declared.permissions == ()
    assert declared.approval is None
    assert declared.timeout_ms == DEFAULT_ACTION_TIMEOUT_MS == 30_000
    assert declared.timeout_seconds == 30.0
    assert make(timeout_ms=0).timeout_seconds is None
    assert make(timeout_ms=-1).timeout_seconds is None
    assert declared.summary == "Echo a message"
    assert make(approval_summary="Approve echo action").summary == "Approve echo action"
    assert declared.parameters_json_schema()["properties"] == {"message": {"title": "Message", "type": "string"}}
    assert declared.validate_input({"message": "hi"}) == EchoInput(message="hi")
    with pytest.raises(ValidationError):
        declared.validate_input({"message": 1})
    assert make(permissions=["a", "b"]).permissions == ("a", "b")  # frozen: stored as a tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        declared.name = "other"  # type: ignore[misc]


def test_output_schema_validates_and_serialises_the_output() -> None:
    class Refund(BaseModel):
        amount: decimal.Decimal

    declared = make(output_schema=Refund)
    assert declared.validate_output({"amount": "12.50"}) == {"amount": "12.50"}
    with pytest.raises(ValidationError):
        declared.validate_output({"amount": "a lot"})
    assert make().validate_output({"anything": object}) == {"anything": object}


def test_action_as_decorator() -> None:
    @action(description="Attach things", input_schema=NoInput, approval=True)
    async def attach(input: NoInput, ctx: Any) -> str:
        return "attached"

    assert is_action(attach)
    assert attach.kind == "approval-gated"
    assert attach.description == "Attach things"
    # The declaration is checked before there is a function to decorate.
    with pytest.raises(AgentConfigurationError, match="durable-pause"):
        action(description="x", input_schema=NoInput, kind="durable-pause", approval=False)


def test_is_action() -> None:
    assert is_action(make())
    assert not is_action(echo)
    assert not is_action({"description": "x"})


def test_compile_actions_resolves_names_from_keys() -> None:
    unnamed, named = make(), make(name="shout")
    compiled = compile_actions({"echo": unnamed, "loud": named})
    assert list(compiled) == ["echo", "shout"]
    assert compiled["echo"].name == "echo"
    assert compiled["shout"] is named
    assert unnamed.name is None  # the declaration itself is left alone
    assert compile_actions({}) == {}


def test_compile_actions_refuses_entries_not_made_by_action() -> None:
    with pytest.raises(AgentConfigurationError) as raised:
        compile_actions({"echo": make(), "raw": echo})
    assert str(raised.value) == 'get_actions() entry "raw" must be created with action().'


def test_compile_actions_refuses_two_entries_with_one_name() -> None:
    with pytest.raises(AgentConfigurationError, match='entries "echo" and "other" both define the action "echo"'):
        compile_actions({"echo": make(), "other": make(name="echo")})
    with pytest.raises(AgentConfigurationError, match="must return a dict"):
        compile_actions([make()])  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------- policies
HELLO = EchoInput(message="hello")
OTHER = EchoInput(message="other")


def sync_permissions(input: EchoInput, ctx: Any) -> list[str]:
    return [f"echo:{input.message}"]


async def async_permissions(input: EchoInput, ctx: Any) -> list[str]:
    await asyncio.sleep(0)
    return [f"echo:{input.message}", ctx]


async def test_resolve_permissions() -> None:
    assert await resolve_permissions(make(), HELLO, None) == []
    assert await resolve_permissions(make(permissions=["echo:run"]), HELLO, None) == ["echo:run"]
    assert await resolve_permissions(make(permissions=sync_permissions), HELLO, None) == ["echo:hello"]
    assert await resolve_permissions(make(permissions=async_permissions), HELLO, "ctx") == ["echo:hello", "ctx"]
    assert await resolve_permissions(make(permissions=lambda i, c: ("t",)), HELLO, None) == ["t"]
    with pytest.raises(TypeError, match="must return a list of strings"):
        await resolve_permissions(make(name="echo", permissions=lambda i, c: "echo:run"), HELLO, None)


async def test_evaluate_approval() -> None:
    assert await evaluate_approval(make(), HELLO, None) is False
    # A durable-pause action without a policy always parks (docs/architecture.md#declaring-an-action).
    assert await evaluate_approval(make(kind="durable-pause"), HELLO, None) is True
    assert await evaluate_approval(make(approval=True), HELLO, None) is True
    assert await evaluate_approval(make(approval=False), HELLO, None) is False
    assert await evaluate_approval(make(approval=allow_when_hello), HELLO, None) is True
    assert await evaluate_approval(make(approval=allow_when_hello), OTHER, None) is False

    async def async_predicate(input: EchoInput, ctx: Any) -> str:
        return "yes" if input.message == "hello" else ""

    gated = make(kind="durable-pause", approval=async_predicate)
    assert await evaluate_approval(gated, HELLO, None) is True  # by truthiness
    assert await evaluate_approval(gated, OTHER, None) is False


async def test_resolve_idempotency_key() -> None:
    assert await resolve_idempotency_key(make(), HELLO, None) is None
    assert await resolve_idempotency_key(make(idempotency_key="replay-key"), HELLO, None) == "replay-key"
    assert await resolve_idempotency_key(make(idempotency_key=lambda i, c: f"k-{i.message}"), HELLO, None) == "k-hello"

    async def async_key(input: EchoInput, ctx: Any) -> str:
        return f"a-{input.message}"

    assert await resolve_idempotency_key(make(idempotency_key=async_key), HELLO, None) == "a-hello"
    empty = compile_actions({"echo": make(idempotency_key=lambda i, c: "")})["echo"]
    with pytest.raises(ValueError, match=r'^Action "echo" returned an empty idempotency key$'):
        await resolve_idempotency_key(empty, HELLO, None)
    with pytest.raises(TypeError, match="must return a string"):
        await resolve_idempotency_key(make(name="echo", idempotency_key=lambda i, c: 7), HELLO, None)


async def test_call_maybe_async_runs_sync_callbacks_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    assert await call_maybe_async(lambda: threading.get_ident()) != loop_thread

    class AsyncCallable:
        async def __call__(self, value: int) -> int:
            return threading.get_ident() if value else 0

    assert await call_maybe_async(AsyncCallable(), 1) == loop_thread

    async def coroutine() -> str:
        return "awaited"

    assert await call_maybe_async(lambda: coroutine()) == "awaited"  # a sync function returning an awaitable


def test_approval_descriptor_has_the_stable_shape() -> None:
    echo_action = compile_actions({
        "echo": make(approval=True, approval_summary="Approve echo action", approval_risk="low",
                     permissions=["echo:run"]),
    })["echo"]
    descriptor = approval_descriptor(
        echo_action, request_id="r1", tool_call_id="tc1", input={"message": "hello"}, permissions=["echo:run"],
    )
    # As the reference sends it (docs/protocol.md#approval-sequence), keys in this order.
    assert json.dumps(descriptor, separators=(",", ":")) == (
        '{"requestId":"r1","toolCallId":"tc1","action":"echo","summary":"Approve echo action",'
        '"input":{"message":"hello"},"permissions":["echo:run"],"risk":"low","kind":"approval-gated"}'
    )


def test_approval_descriptor_without_risk_and_with_a_model_input() -> None:
    paused = make(kind="durable-pause")
    descriptor = approval_descriptor(
        paused, name="pauseAction", request_id="", tool_call_id="dp1", input=EchoInput(message="hi"),
        permissions=("pause:run",),
    )
    assert descriptor == {
        "requestId": "", "toolCallId": "dp1", "action": "pauseAction", "summary": "Echo a message",
        "input": {"message": "hi"}, "permissions": ["pause:run"], "kind": "durable-pause",
    }
    assert "risk" not in descriptor
    with pytest.raises(ValueError, match="tool name"):
        approval_descriptor(paused, request_id="", tool_call_id="dp1", input={}, permissions=[])


# --------------------------------------------------------------------------------------- envelopes
def test_thrown_errors_become_name_and_message() -> None:
    # JavaScript's Error("action failed") is Python's Exception("action failed").
    assert error_envelope(Exception("action failed")) == {"error": {"name": "Error", "message": "action failed"}}
    assert error_envelope(ValueError("bad")) == {"error": {"name": "ValueError", "message": "bad"}}
    assert error_envelope(KeyError()) == {"error": {"name": "KeyError", "message": "KeyError()"}}
    assert error_envelope("a string reason") == {"error": {"name": "Error", "message": "a string reason"}}


def test_authorization_envelopes() -> None:
    assert authorization_error(missing_permission_message(["echo:run"]), ["echo:run"]) == {
        "error": {"name": "ActionAuthorizationError", "message": "Missing required permission: echo:run",
                  "permissions": ["echo:run"]},
    }
    assert missing_permission_message(["a", "b"]) == "Missing required permission: a, b"
    assert authorization_error() == {
        "error": {"name": "ActionAuthorizationError", "message": "Action is not authorized", "permissions": []},
    }
    assert error_envelope(ActionAuthorizationError(permissions=("x",)))["error"]["permissions"] == ["x"]


def test_ledger_and_approval_envelopes() -> None:
    assert pending_error() == {"error": {
        "name": "ActionPendingError",
        "message": "A prior attempt of this action is in an unknown state; not re-executed. "
                   "Manual reconciliation may be required.",
    }}
    assert key_conflict_error("action:echo:conflict-key", "echo") == {"error": {
        "name": "ActionKeyConflict",
        "message": 'Idempotency key "action:echo:conflict-key" for action "echo" was reused with different input. '
                   "This is a programming error; do not retry.",
    }}
    assert error_envelope(ActionApprovalInputError()) == {"error": {
        "name": "ActionApprovalInputError",
        "message": "Approved action input cannot be changed by beforeToolCall",
    }}


def test_timeout_and_abort_envelopes() -> None:
    assert str(ActionTimeoutError(5)) == "Action timed out after 5ms"
    assert str(ActionTimeoutError(5.0)) == "Action timed out after 5ms"
    assert str(ActionTimeoutError(2.5)) == "Action timed out after 2.5ms"
    # The reference's timer aborts with a plain Error, so the model reads the name "Error".
    assert error_envelope(ActionTimeoutError(30_000)) == {
        "error": {"name": "Error", "message": "Action timed out after 30000ms"}}
    assert "timed out" in error_envelope(ActionTimeoutError(5))["error"]["message"]
    assert aborted_error() == {"error": {"name": "Error", "message": "Action aborted"}}
    assert aborted_error(asyncio.CancelledError()) == {"error": {"name": "Error", "message": "Action aborted"}}
    assert aborted_error(RuntimeError("turn cancelled")) == {
        "error": {"name": "RuntimeError", "message": "turn cancelled"},
    }


def test_action_errors_form_one_family() -> None:
    for error in (ActionPendingError(), ActionKeyConflict("k", "a"), ActionTimeoutError(5), ActionAuthorizationError()):
        assert isinstance(error, ActionError)
    assert ActionTimeoutError(5).timeout_ms == 5
    assert ActionKeyConflict("action:a:k", "a").ledger_key == "action:a:k"


async def test_ledger_messages_match_the_envelopes() -> None:
    """The ledger's outcome messages are the envelopes' exact strings."""
    from agents_app.actions import ledger

    pending = pending_error()["error"]
    conflict = key_conflict_error("action:echo:k", "echo")["error"]
    assert (pending["name"], pending["message"]) == (ActionPendingError.name, PENDING_MESSAGE)
    assert (conflict["name"], conflict["message"]) == (
        ActionKeyConflict.name, ledger.conflict_message("action:echo:k", "echo"),
    )
    empty = compile_actions({"echo": make(idempotency_key=lambda i, c: "")})["echo"]
    with pytest.raises(ValueError, match=f"^{re.escape(ledger.empty_key_message('echo'))}$"):
        await resolve_idempotency_key(empty, HELLO, None)


# --------------------------------------------------------------------------------------- outputs
def test_long_strings_are_truncated() -> None:
    prepared = prepare_output("x" * 25_000)
    assert "[truncated" in prepared
    assert len(prepared) < 22_000
    assert prepared == "x" * 20_000 + "\n\n[truncated 5000 chars]"
    assert prepare_output("y" * ACTION_OUTPUT_MAX_CHARS) == "y" * 20_000
    assert prepare_output("") == ""


def test_cycles_and_repeated_references_become_circular() -> None:
    # The reference makes {count: 12n, self: <cycle>} {count: "12n", self: "[Circular]"}; Python ints stay ints.
    output: dict[str, Any] = {"count": 12}
    output["self"] = output
    assert prepare_output(output) == {"count": 12, "self": "[Circular]"}
    shared = [1]
    assert prepare_output({"a": shared, "b": shared}) == {"a": [1], "b": "[Circular]"}
    assert prepare_output({"a": 7, "b": 7, "c": "s", "d": "s"}) == {"a": 7, "b": 7, "c": "s", "d": "s"}


def test_large_json_outputs_become_a_truncated_preview() -> None:
    rows = [{"row": i, "text": "z" * 100} for i in range(500)]
    text = json.dumps(rows, separators=(",", ":"))
    prepared = prepare_output(rows)
    assert prepared["truncated"] is True
    assert prepared["chars"] == len(text)
    assert prepared["preview"] == text[:20_000] + f"\n\n[truncated {len(text) - 20_000} chars]"


def test_none_and_small_values() -> None:
    assert prepare_output(None) is None
    assert prepare_output(0) == 0
    assert prepare_output(False) is False
    original = {"a": [1, {"b": 2}]}
    prepared = prepare_output(original)
    assert prepared == original
    assert prepared is not original
    assert prepared["a"][1] is not original["a"][1]  # a fresh copy: the transcript never aliases it


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Opaque:
    def __str__(self) -> str:
        return "<opaque>"


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_non_json_values_are_normalised() -> None:
    moment = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    ident = uuid.UUID(int=1)
    prepared = prepare_output({
        "when": moment, "day": moment.date(), "price": decimal.Decimal("12.50"), "id": ident,
        "bytes": b"hi\xff", "set": {3, 1, 2}, "tuple": (1, "a"), "colour": Colour.RED, "point": Point(1, 2),
        "model": EchoInput(message="m"), "object": Opaque(), "nan": float("nan"), "inf": float("-inf"),
        2: "int key", None: "none key", True: "bool key", (1, 2): "tuple key", "big": 2**80,
    })
    assert prepared == {
        "when": "2026-01-02T03:04:05+00:00", "day": "2026-01-02", "price": "12.50", "id": str(ident),
        "bytes": "hi\\xff", "set": [1, 2, 3], "tuple": [1, "a"], "colour": "red", "point": {"x": 1, "y": 2},
        "model": {"message": "m"}, "object": "<opaque>", "nan": None, "inf": None,
        "2": "int key", "null": "none key", "true": "bool key", "(1, 2)": "tuple key", "big": 2**80,
    }
    json.dumps(prepared, allow_nan=False)


def test_ints_too_long_for_text_become_hex() -> None:
    huge = 1 << 20_000
    assert to_json_safe([huge]) == [hex(huge)]


def test_unserialisable_outputs_are_reported_not_raised() -> None:
    assert prepare_output({"x": Unprintable()}) == {"serialized": False, "error": "no text"}


# --------------------------------------------------------------------------------------- attachments
def test_attachments_are_recorded_with_an_event(emitted: list[tuple[str, dict[str, Any]]]) -> None:
    replies = ReplyAttachments()
    assert replies.record({"type": "voice_note"}, action="attachAction") is True
    assert replies.record({"type": "card", "payload": {"id": 1}}) is True
    assert replies.items() == [{"type": "voice_note"}, {"type": "card", "payload": {"id": 1}}]
    assert emitted == [
        ("action:reply-attached", {"action": "attachAction", "attachmentType": "voice_note"}),
        ("action:reply-attached", {"attachmentType": "card"}),
    ]


def test_invalid_attachments_are_ignored(emitted: list[tuple[str, dict[str, Any]]]) -> None:
    replies = ReplyAttachments()
    for invalid in (None, {}, {"type": 123}, [{"type": "card"}], "card", {"kind": "card"}, {"type": Unprintable()}):
        assert replies.record(invalid) is False
    assert replies.record({"type": "card", "payload": Unprintable()}) is False  # cannot be serialised
    assert replies.items() == []
    assert emitted == []


def test_attachments_are_normalised_copies() -> None:
    replies = ReplyAttachments()
    payload: dict[str, Any] = {"big": 1, "when": dt.date(2026, 1, 2)}
    payload["self"] = payload
    replies.record({"type": "card", "payload": payload})
    assert replies.items() == [{"type": "card", "payload": {"big": 1, "when": "2026-01-02", "self": "[Circular]"}}]
    payload["big"] = 2  # later changes to the action's objects do not leak in
    copies = replies.items()
    copies[0]["payload"]["big"] = 3  # nor do changes to what items() handed out
    assert replies.items()[0]["payload"]["big"] == 1


def test_attachments_are_capped_keeping_the_first(emitted: list[tuple[str, dict[str, Any]]]) -> None:
    replies = ReplyAttachments()
    results = [replies.record({"type": "x", "i": i}) for i in range(40)]
    assert results == [True] * 32 + [False] * 8
    items = replies.items()
    assert len(items) == MAX_REPLY_ATTACHMENTS_PER_TURN == 32
    assert items[0] == {"type": "x", "i": 0}
    assert items[-1] == {"type": "x", "i": 31}
    assert len(emitted) == 32


def test_rollback_discards_what_a_failed_call_recorded() -> None:
    replies = ReplyAttachments()
    replies.record({"type": "kept"})
    failed = replies.attempt("failing")
    failed.record({"type": "failed-1"})
    failed.record({"type": "failed-2"})
    failed.rollback()
    assert replies.items() == [{"type": "kept"}]
    replies.record({"type": "after"})
    assert replies.items() == [{"type": "kept"}, {"type": "after"}]


def test_an_attempt_rolls_back_only_its_own_attachments(emitted: list[tuple[str, dict[str, Any]]]) -> None:
    replies = ReplyAttachments()
    failing, sibling = replies.attempt("failing"), replies.attempt("sibling")
    failing.record({"type": "draft"})
    sibling.record({"type": "card"})  # a concurrent tool call of the same step
    failing.record({"type": "voice_note"})
    failing.rollback()
    assert replies.items() == [{"type": "card"}]
    assert emitted[1] == ("action:reply-attached", {"action": "sibling", "attachmentType": "card"})
    # The freed slots can be used again.
    full = ReplyAttachments(limit=1)
    attempt = full.attempt("a")
    attempt.record({"type": "x"})
    assert full.record({"type": "y"}) is False
    attempt.rollback()
    assert full.record({"type": "y"}) is True


def test_no_attachments_recorder_is_a_no_op(emitted: list[tuple[str, dict[str, Any]]]) -> None:
    assert NO_ATTACHMENTS.record({"type": "voice_note"}, action="x") is False
    assert NO_ATTACHMENTS.attempt("x").record({"type": "voice_note"}) is False
    NO_ATTACHMENTS.attempt("x").rollback()
    assert NO_ATTACHMENTS.items() == []
    assert len(NO_ATTACHMENTS) == 0
    assert emitted == []
