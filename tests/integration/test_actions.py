"""Actions inside turns (docs/architecture.md#actions): the reference's action and reply-attachment cases,
on our stack.

The reference's ``ThinkToolsTestAgent`` is ``tests.action_agents.ActionTestAgent``; its mock
model is our offline demo model (``/tool echo {...}``, tool call ids ``demo_<n>_0``); "direct"
calls of the compiled tool (``executeEchoActionToolForTest``) go through
``pipeline.execute_action`` with tool call id ``tc-direct`` outside a turn.
"""

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import override_settings
from django.utils import timezone
from pydantic import BaseModel

from agents_app import transcript
from agents_app.actions.pipeline import execute_action
from agents_app.hooks import ToolCallDecision
from agents_app.models import AgentInstance, LedgerEntry
from tests.action_agents import PROBES, SETUP, ActionTestAgent, Setup, probe
from tests.support.frames import (
    chat_request,
    chunks,
    follow_continuation,
    is_done,
    open_agent,
    receive_until,
    user_message,
)

pytestmark = pytest.mark.django_db(transaction=True)

HELLO = '/tool echo {"message": "hello"}'
AUTH_ERROR = {"error": {"name": "ActionAuthorizationError", "message": "Missing required permission: echo:run",
                        "permissions": ["echo:run"]}}
PENDING = {"error": {"name": "ActionPendingError", "message": (
    "A prior attempt of this action is in an unknown state; not re-executed. Manual reconciliation may be required."
)}}


@pytest.fixture(autouse=True)
def fresh_probes() -> Any:
    SETUP.clear()
    PROBES.clear()
    yield
    SETUP.clear()
    PROBES.clear()


def configure(name: str, **options: Any) -> Setup:
    SETUP[name] = Setup(**options)
    return SETUP[name]


async def turn(name: str, prompt: str = HELLO, user: Any = None) -> list[dict[str, Any]]:
    """Run one programmatic turn on ``ActionTestAgent/name``; return the stored transcript."""
    agent = await ActionTestAgent.aget(name, owner=user)
    result = await agent.save_messages([prompt])
    assert result.status == "completed", result
    return await database_sync_to_async(transcript.load)(agent.instance)


def part(messages: list[dict[str, Any]], tool_call_id: str = "demo_0_0") -> dict[str, Any]:
    return next(p for m in messages for p in m.get("parts", []) if p.get("toolCallId") == tool_call_id)


async def direct(name: str, message: str = "hello") -> Any:
    """The compiled echo tool called directly, outside a turn (``executeEchoActionToolForTest``)."""
    agent = ActionTestAgent.for_turn((await ActionTestAgent.aget(name)).instance, request_id="")
    action = agent.compiled_actions()["echo"]
    return await execute_action(agent.turn, action, action.validate_input({"message": message}),
                                tool_call_id="tc-direct", messages=[])


async def ledger_rows() -> list[dict[str, Any]]:
    return [row async for row in LedgerEntry.objects.order_by("key").values("key", "action_name", "status",
                                                                              "updated_at")]


async def seed(key: str, *, name: str = "", status: str = "pending", age: timedelta = timedelta(0),
               input: Any = None) -> None:
    """A ledger row in the ledger of ``ActionTestAgent/name`` (or outside any instance)."""
    from agents_app.actions import ledger

    scope = str((await ActionTestAgent.aget(name)).instance.pk) if name else ""
    stamp = timezone.now() - age
    await LedgerEntry.objects.acreate(
        scope=scope, key=key, action_name="echo", status=status,
        input_hash=ledger.input_hash(input or {"message": "hello"}),
        created_at=stamp, updated_at=stamp,
        result_json=json.dumps({"valuePresent": True, "value": "old"}) if status == "settled" else "",
    )


# ----------------------------------------------------------- the action pipeline and the ledger
async def test_1_executes_an_action_through_the_tool_call_hooks():
    configure("t1")
    messages = await turn("t1")
    seen = probe("t1")
    assert [(c.tool_name, c.input) for c in seen.before] == [("echo", {"message": "hello"})]
    assert [output for _, output in seen.after] == ["action echo: hello"]
    assert seen.count == 1
    [ctx] = seen.contexts
    assert ctx.request_id and ctx.tool_call_id == "demo_0_0" and len(ctx.messages) > 0
    assert part(messages)["output"] == "action echo: hello"


async def test_2_allows_permissioned_actions_by_default():
    configure("t2", permissions=["echo:run"])
    assert part(await turn("t2"))["output"] == "action echo: hello"
    assert probe("t2").count == 1


async def test_3_denies_permissioned_actions_before_execute():
    configure("t3", permissions=["echo:run"], granted=[])
    assert part(await turn("t3"))["output"] == AUTH_ERROR
    assert probe("t3").count == 0
    assert await ledger_rows() == []


async def test_authorize_turn_false_denies_every_action():
    configure("t3b", turn_allowed=False)
    assert part(await turn("t3b"))["output"] == {"error": {
        "name": "ActionAuthorizationError", "message": "Action is not authorized", "permissions": []}}
    assert probe("t3b").count == 0


async def test_4_maps_thrown_action_errors_to_structured_tool_output():
    configure("t4", behaviour="throw")
    assert part(await turn("t4"))["output"] == {"error": {"name": "Error", "message": "action failed"}}


async def test_5_times_out_actions_with_a_structured_tool_output():
    configure("t5", behaviour="hang", timeout_ms=5)
    output = part(await turn("t5"))["output"]
    assert output == {"error": {"name": "Error", "message": "Action timed out after 5ms"}}


async def test_6_truncates_oversized_action_outputs_before_model_consumption():
    configure("t6", behaviour="large")
    output = part(await turn("t6"))["output"]
    assert "[truncated" in output and len(output) < 22_000


async def test_7_normalizes_non_json_safe_action_outputs():
    configure("t7", behaviour="non-json")
    assert part(await turn("t7"))["output"] == {"count": 2**80, "self": "[Circular]"}


async def test_8_records_and_replays_settled_action_ledger_rows():
    configure("t8", key="replay-key")
    assert await direct("t8") == "action echo: hello"
    assert probe("t8").count == 1
    [row] = await ledger_rows()
    assert (row["key"], row["action_name"], row["status"]) == ("action:echo:replay-key", "echo", "settled")
    assert await direct("t8") == "action echo: hello"
    assert probe("t8").count == 1


async def test_9_returns_a_programming_error_for_ledger_key_input_conflicts():
    configure("t9", key="conflict-key")
    await direct("t9")
    assert await direct("t9", "different") == {"error": {"name": "ActionKeyConflict", "message": (
        'Idempotency key "action:echo:conflict-key" for action "echo" was reused with different input. '
        "This is a programming error; do not retry."
    )}}
    assert probe("t9").count == 1


async def test_10_does_not_execute_when_the_ledger_has_an_unknown_pending_row():
    configure("t10", key="pending-key")
    await seed("action:echo:pending-key", name="t10")
    assert part(await turn("t10"))["output"] == PENDING
    assert probe("t10").count == 0


@override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=timedelta(milliseconds=50))
async def test_11_reclaims_a_stale_explicit_key_pending_row_and_settles_it():
    configure("t11", key="stale-key")
    await seed("action:echo:stale-key", age=timedelta(seconds=1), name="t11")
    seeded = (await ledger_rows())[0]["updated_at"]
    assert await direct("t11") == "action echo: hello"
    assert probe("t11").count == 1
    [row] = await ledger_rows()
    assert row["status"] == "settled" and row["updated_at"] > seeded


@override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=timedelta(milliseconds=50))
async def test_12_does_not_reclaim_a_stale_fallback_key_pending_row():
    configure("t12")
    await seed("tool:tc-direct", age=timedelta(seconds=1), name="t12")
    assert await direct("t12") == PENDING
    assert probe("t12").count == 0


@override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=None)
async def test_13_does_not_reclaim_when_the_lease_is_disabled():
    configure("t13", key="stale-key")
    await seed("action:echo:stale-key", age=timedelta(days=1), name="t13")
    assert await direct("t13") == PENDING
    assert probe("t13").count == 0


@override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=timedelta(milliseconds=50))
async def test_14_releases_the_row_when_a_reclaimed_execution_throws():
    configure("t14", key="stale-key", behaviour="throw", error="ledger action failed")
    await seed("action:echo:stale-key", age=timedelta(seconds=1), name="t14")
    assert await direct("t14") == {"error": {"name": "Error", "message": "ledger action failed"}}
    assert probe("t14").count == 1
    assert await ledger_rows() == []
    await direct("t14")
    assert probe("t14").count == 2
    assert await ledger_rows() == []


@override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=timedelta(milliseconds=50))
async def test_15_executes_once_when_a_stale_reclaim_races_itself_in_one_process():
    configure("t15", key="stale-key", behaviour="slow")
    await seed("action:echo:stale-key", age=timedelta(seconds=1), name="t15")
    assert await asyncio.gather(direct("t15"), direct("t15")) == ["action echo: hello"] * 2
    assert probe("t15").count == 1
    assert [r["status"] for r in await ledger_rows()] == ["settled"]


async def test_16_releases_ledger_keys_after_execution_failure():
    configure("t16", key="fail-key", behaviour="throw")
    for _ in range(2):
        assert (await direct("t16"))["error"]["message"] == "action failed"
    assert probe("t16").count == 2
    assert await ledger_rows() == []


async def test_17_coalesces_same_process_duplicate_executions():
    configure("t17", key="same-key", behaviour="slow")
    assert await asyncio.gather(direct("t17"), direct("t17")) == ["action echo: hello"] * 2
    assert probe("t17").count == 1
    assert [r["status"] for r in await ledger_rows()] == ["settled"]


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("cannot print me")


async def test_18_releases_ledger_rows_when_result_serialization_fails(emitted):
    configure("t18", key="symbol-key")
    agent = ActionTestAgent.for_turn((await ActionTestAgent.aget("t18")).instance, request_id="")
    action = agent.compiled_actions()["echo"]
    # Python's Symbol: an output that cannot be made JSON at all.
    unprintable = action.__class__(**{**action.__dict__, "execute": lambda input, ctx: Unprintable()})
    output = await execute_action(agent.turn, unprintable, action.validate_input({"message": "hello"}),
                                  tool_call_id="tc-direct", messages=[])
    assert output == {"serialized": False, "error": "cannot print me"}
    assert await ledger_rows() == []
    assert ("action:ledger:serialize_failed", {"action": "echo", "key": "action:echo:symbol-key"}) in emitted


async def test_19_sweeps_expired_ledger_rows_without_deleting_fresh_rows():
    from agents_app.actions import ledger

    # Ages far from the TTLs on both sides: a busy machine's delay between seed and sweep cannot
    # make the fresh row look expired.
    await seed("old-settled", status="settled", age=timedelta(hours=2))
    await seed("old-pending", age=timedelta(hours=2))
    await seed("fresh-settled", status="settled")
    swept = await database_sync_to_async(ledger.sweep_expired)(
        settled_ttl=timedelta(hours=1), pending_ttl=timedelta(hours=1), batch_size=10)
    assert swept == {"settled": 1, "pending": 1}
    assert [r["key"] for r in await ledger_rows()] == ["fresh-settled"]


# ----------------------------------------------------------------------- approval-gated actions
async def opened(ws, name: str):
    return await open_agent(ws, f"/agents/action-test-agent/{name}")


async def ask(a, prompt: str = HELLO) -> list[dict[str, Any]]:
    await a.send_json_to(chat_request("r1", [user_message("u1", prompt)]))
    return await receive_until(a, is_done("r1"))


async def answer(a, approved: bool) -> list[dict[str, Any]]:
    """Approve or reject demo_0_0 with autoContinue and follow the continuation to its end."""
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": approved,
                          "autoContinue": True})
    return await follow_continuation(a)


async def stored(name: str) -> list[dict[str, Any]]:
    """The transcript of the test's one instance ``name`` (whoever owns it)."""
    instance = await AgentInstance.objects.aget(slug=ActionTestAgent.slug(), name=name)
    return await database_sync_to_async(transcript.load)(instance)


APPROVAL = {"approval": True, "approval_summary": "Approve echo action", "approval_risk": "low"}


async def test_20_emits_an_approval_request_with_a_stable_action_descriptor(ws):
    configure("t20", permissions=["echo:run"], granted=["echo:run"], **APPROVAL)
    frames = await ask(await opened(ws, "t20"))
    [request] = [c for c in chunks(frames) if c["type"] == "tool-approval-request"]
    descriptor = request["approvalDescriptor"]
    assert isinstance(descriptor.pop("requestId"), str)
    assert descriptor == {"toolCallId": "demo_0_0", "action": "echo", "summary": "Approve echo action",
                          "input": {"message": "hello"}, "permissions": ["echo:run"], "risk": "low",
                          "kind": "approval-gated"}
    stored_part = part(await stored("t20"))
    assert stored_part["state"] == "approval-requested"
    assert stored_part["approval"]["descriptor"]["action"] == "echo"
    assert stored_part["approval"]["descriptor"]["input"] == {"message": "hello"}
    assert probe("t20").count == 0


async def test_21_supports_function_valued_approval_and_permission_policies(ws):
    configure("t21", permissions=lambda input, ctx: [f"echo:{input.message}"],
              approval=lambda input, ctx: input.message == "hello", granted=["echo:hello"])
    frames = await ask(await opened(ws, "t21"))
    [request] = [c for c in chunks(frames) if c["type"] == "tool-approval-request"]
    assert request["approvalDescriptor"]["permissions"] == ["echo:hello"]
    assert request["approvalDescriptor"]["input"] == {"message": "hello"}


async def test_21b_a_predicate_that_says_no_runs_the_action_at_once():
    configure("t21b", approval=lambda input, ctx: input.message == "hello")
    assert part(await turn("t21b", '/tool echo {"message": "other"}'))["output"] == "action echo: other"


async def test_22_denies_approval_gated_actions_before_prompting(ws):
    configure("t22", permissions=["echo:run"], granted=[], **APPROVAL)
    frames = await ask(await opened(ws, "t22"))
    assert "tool-approval-request" not in [c["type"] for c in chunks(frames)]
    stored_part = part(await stored("t22"))
    assert (stored_part["state"], stored_part["output"]) == ("output-available", AUTH_ERROR)
    assert probe("t22").count == 0
    assert await ledger_rows() == []


async def test_23_rechecks_authorization_after_approval_before_execute(ws):
    setup = configure("t23", permissions=["echo:run"], granted=["echo:run"], **APPROVAL)
    a = await opened(ws, "t23")
    await ask(a)
    setup.granted = []
    await answer(a, True)
    stored_part = part(await stored("t23"))
    assert (stored_part["state"], stored_part["output"]) == ("output-available", AUTH_ERROR)
    assert probe("t23").count == 0


async def test_the_continuation_after_an_approval_acts_for_the_user_who_asked(ws):
    """authorize_turn sees the same user in the continuation as in the turn that asked."""
    configure("t23b", permissions=["echo:run"], granted="user", **APPROVAL)
    a = await opened(ws, "t23b")
    await ask(a)
    await answer(a, True)
    assert part(await stored("t23b"))["output"] == "action echo: hello"
    assert probe("t23b").count == 1


async def test_24_resumes_and_executes_an_approved_action(ws):
    configure("t24", **APPROVAL)
    a = await opened(ws, "t24")
    await ask(a)
    frames = await answer(a, True)
    assert probe("t24").count == 1
    stored_part = part(await stored("t24"))
    assert stored_part["state"] == "output-available"
    assert stored_part["output"] == "action echo: hello"
    assert stored_part["approval"]["approved"] is True
    assert stored_part["approval"]["descriptor"]["action"] == "echo"
    assert any(c["type"] == "tool-output-available" for c in chunks(frames))


async def test_25_records_approval_gated_actions_only_after_approval(ws):
    configure("t25", key="approval-ledger-key", **APPROVAL)
    a = await opened(ws, "t25")
    await ask(a)
    assert await ledger_rows() == []
    await answer(a, True)
    assert probe("t25").count == 1
    [row] = await ledger_rows()
    assert (row["key"], row["status"]) == ("action:echo:approval-ledger-key", "settled")


async def test_26_does_not_execute_an_approved_action_with_rewritten_input(ws):
    setup = configure("t26", **APPROVAL)
    a = await opened(ws, "t26")
    await ask(a)
    setup.before = lambda call: ToolCallDecision.allow({"message": "rewritten"})
    await answer(a, True)
    assert probe("t26").count == 0
    assert part(await stored("t26"))["output"] == {"error": {
        "name": "ActionApprovalInputError", "message": "Approved action input cannot be changed by beforeToolCall"}}


async def test_27_does_not_execute_a_rejected_action(ws):
    configure("t27", **APPROVAL)
    a = await opened(ws, "t27")
    await ask(a)
    await answer(a, False)
    assert probe("t27").count == 0
    stored_part = part(await stored("t27"))
    assert stored_part["state"] == "output-denied"
    assert stored_part["approval"]["approved"] is False
    assert stored_part["approval"]["descriptor"]["action"] == "echo"
    assert await ledger_rows() == []


async def test_28_keeps_before_tool_call_as_the_outer_gate_after_approval(ws):
    setup = configure("t28", **APPROVAL)
    a = await opened(ws, "t28")
    await ask(a)
    setup.before = lambda call: ToolCallDecision.block("blocked by hook")
    await answer(a, True)
    assert probe("t28").count == 0
    assert [output for _, output in probe("t28").after] == ["blocked by hook"]


async def test_before_tool_call_runs_only_after_approval_and_execute_runs_once(ws):
    """The reference's "raw needsApproval tool + beforeToolCall ordering" companion test."""
    configure("t28b", **APPROVAL)
    a = await opened(ws, "t28b")
    await ask(a)
    assert probe("t28b").before == []
    await answer(a, True)
    assert [(c.tool_name, c.approved) for c in probe("t28b").before] == [("echo", True)]
    assert probe("t28b").count == 1


async def test_before_tool_call_may_substitute_an_output():
    configure("t28c", before=lambda call: ToolCallDecision.substitute({"cached": True}))
    assert part(await turn("t28c"))["output"] == {"cached": True}
    assert probe("t28c").count == 0


# ----------------------------------------------------------------------------- reply attachments
ATTACH = "/tool attachAction {}"


async def attachments_of(name: str, turns: int | None = None) -> list[dict[str, Any]]:
    """The attachments of the latest turn, once ``turns`` turns have reported (on_chat_response
    runs after the terminal frame, so a test that followed the stream may be a moment early)."""
    async with asyncio.timeout(5):
        while len(probe(name).responses) < (turns or 1):
            await asyncio.sleep(0.01)
    return probe(name).responses[-1].attachments


async def test_records_attachments_on_chat_response_result_without_changing_tool_output():
    configure("a1", attach="two")
    messages = await turn("a1", ATTACH)
    assert await attachments_of("a1") == [{"type": "voice_note"}, {"type": "card", "payload": {"id": 1}}]
    assert (part(messages)["state"], part(messages)["output"]) == ("output-available", "attached")
    # The reply carries them for the chat page, as render_attachment shows them.
    assert messages[-1]["metadata"]["attachments"] == [
        {"type": "voice_note", "label": "Voice note"}, {"type": "card", "payload": {"id": 1}}]


async def test_ignores_invalid_attachments():
    configure("a2", attach="invalid")
    await turn("a2", ATTACH)
    assert await attachments_of("a2") == []


async def test_normalizes_non_json_safe_attachment_payloads():
    configure("a3", attach="non-json")
    await turn("a3", ATTACH)
    assert await attachments_of("a3") == [{"type": "card", "payload": {"big": 2**80, "self": "[Circular]"}}]


async def test_caps_attachments_per_turn():
    configure("a4", attach="overcap")
    await turn("a4", ATTACH)
    kept = await attachments_of("a4")
    assert len(kept) == 32
    assert (kept[0], kept[-1]) == ({"type": "x", "i": 0}, {"type": "x", "i": 31})


async def test_resets_across_turns_and_keeps_the_post_turn_getter_scoped_by_request_id():
    setup = configure("a5", attach="two")
    await turn("a5", ATTACH)
    [result] = probe("a5").responses
    agent = await ActionTestAgent.aget("a5")
    assert len(await agent.reply_attachments(result.request_id)) == 2
    assert await agent.reply_attachments("bogus") == []
    result.attachments.append({"type": "mutated"})
    result.attachments[0]["type"] = "changed"
    assert await agent.reply_attachments(result.request_id) == [
        {"type": "voice_note"}, {"type": "card", "payload": {"id": 1}}]
    setup.attach = "none"
    await turn("a5", ATTACH)
    assert await attachments_of("a5") == []
    assert await agent.reply_attachments() == []


async def test_does_not_refire_attachments_on_ledger_replay():
    configure("a6", key="attach-ledger-key", echo_attaches=True)
    await turn("a6")
    assert await attachments_of("a6") == [{"type": "voice_note"}]
    await turn("a6")
    assert await attachments_of("a6") == []
    assert probe("a6").count == 1


async def test_does_not_record_attachments_from_function_valued_idempotency_keys():
    configure("a7", key="fn-key", key_attaches=True, echo_attaches=True)
    await turn("a7")
    assert await attachments_of("a7") == [{"type": "voice_note"}]
    await turn("a7")
    assert await attachments_of("a7") == []
    assert probe("a7").count == 1


async def test_treats_attach_reply_in_approval_predicates_as_a_no_op():
    configure("a8", attach="predicate-noop")
    await turn("a8", ATTACH)
    assert await attachments_of("a8") == []


async def test_treats_attach_reply_in_permission_policies_as_a_no_op():
    configure("a9", attach="permission-noop")
    await turn("a9", ATTACH)
    assert await attachments_of("a9") == []


async def test_discards_attachments_from_failed_actions():
    configure("a10", attach="attach-then-throw")
    messages = await turn("a10", ATTACH)
    assert await attachments_of("a10") == []
    assert part(messages)["output"] == {"error": {"name": "RuntimeError", "message": "attach failed"}}


async def test_supports_attach_reply_after_an_approval_gated_action_is_approved(ws):
    configure("a11", attach="approval-gated")
    a = await opened(ws, "a11")
    await ask(a, ATTACH)
    await answer(a, True)
    assert await attachments_of("a11", turns=2) == [{"type": "voice_note"}]


async def test_treats_attach_reply_from_durable_pause_approved_actions_as_a_no_op():
    configure("a12")
    await turn("a12", '/tool pauseAction {"message": "hi"}')
    agent = await ActionTestAgent.aget("a12")
    [pending] = await agent.pending_approvals()
    assert await agent.approve_execution(pending["executionId"]) == "paused-exec: hi"
    assert probe("a12").pause_count == 1
    assert all(r.attachments == [] for r in probe("a12").responses)


async def test_render_attachment_decides_what_the_chat_page_is_shown():
    configure("a13", attach="with-internal")
    messages = await turn("a13", ATTACH)
    assert await attachments_of("a13") == [{"type": "voice_note"}, {"type": "x-internal"}]
    assert messages[-1]["metadata"]["attachments"] == [{"type": "voice_note", "label": "Voice note"}]


async def test_a_before_tool_call_hook_that_raises_fails_the_call_not_the_turn():
    def broken(call):
        raise RuntimeError("hook bug")

    configure("h1", before=broken)
    messages = await turn("h1")
    assert part(messages)["state"] == "output-error"
    assert part(messages)["errorText"] == "before_tool_call: RuntimeError: hook bug"
    assert probe("h1").count == 0


async def test_an_approval_predicate_that_raises_fails_the_call_and_never_runs_it():
    def broken(input, ctx):
        raise ValueError("predicate bug")

    configure("h2", approval=broken)
    messages = await turn("h2")
    assert (part(messages)["state"], part(messages)["errorText"]) == ("output-error", "ValueError: predicate bug")
    assert probe("h2").count == 0


async def test_a_clients_stale_copy_never_overwrites_a_decided_pause(ws, user):
    """The next request carries the client's copy of the reply (paused, no descriptor: the AI SDK
    does not keep it on an output); the server's decided part stays."""
    configure("s1")
    a = await opened(ws, "s1")
    frames = await ask(a, '/tool pauseAction {"message": "hi"}')
    agent = await ActionTestAgent.aget("s1", owner=user)
    [pending] = await agent.pending_approvals()
    assert await agent.approve_execution(pending["executionId"]) == "paused-exec: hi"
    reply = (await stored("s1"))[1]
    stale_part = {k: v for k, v in part([reply]).items() if k != "approvalDescriptor"}
    stale_part["output"] = next(c["output"] for c in chunks(frames) if c["type"] == "tool-output-available")
    stale = {**reply, "parts": [stale_part if p.get("toolCallId") else p for p in reply["parts"]]}
    await a.send_json_to(chat_request("r2", [user_message("u1", '/tool pauseAction {"message": "hi"}'), stale,
                                             user_message("u2", "thanks")]))
    await receive_until(a, is_done("r2"))
    kept = part(await stored("s1"))
    assert kept["output"] == "paused-exec: hi"
    assert kept["approvalDescriptor"]["action"] == "pauseAction"


class EchoOutput(BaseModel):
    echoed: str
    length: int


async def test_an_output_schema_checks_and_serialises_what_execute_returns():
    configure("o1", behaviour="structured", output_schema=EchoOutput)
    assert part(await turn("o1"))["output"] == {"echoed": "hello", "length": 5}
    configure("o2", output_schema=EchoOutput)  # execute returns a string
    output = part(await turn("o2"))["output"]
    assert output["error"]["name"] == "ValidationError"
    assert probe("o2").count == 1
    # o1's call is settled; o2's output failed its schema, so its row was released.
    assert [r["status"] for r in await ledger_rows()] == ["settled"]
