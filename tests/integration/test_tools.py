"""Server, client and approval tools, auto-continuation, data parts (docs/architecture.md#tools).

How answers and continuations travel: docs/protocol.md#tool-results-and-approvals.
"""

import asyncio
import json

import pytest
from django.test import AsyncClient

from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance, Turn
from tests.support.frames import (
    RESP,
    chat_request,
    chunks,
    follow_continuation,
    is_done,
    open_agent,
    receive_until,
    text_of,
    user_message,
)

pytestmark = pytest.mark.django_db(transaction=True)

EMAIL = '/tool send_email {"to": "bob@example.com", "subject": "hi"}'
SENT = "Email to bob@example.com about 'hi' sent (demo)."


async def opened(ws, name: str):
    return await open_agent(ws, f"/agents/demo-agent/{name}")


async def history(user, name):
    client = AsyncClient()
    await client.aforce_login(user)
    return (await client.get(f"/agents/demo-agent/{name}/get-messages")).json()


def tool_part(message, tool_call_id):
    return next(p for p in message["parts"] if p.get("toolCallId") == tool_call_id)


async def test_server_tool_output_and_summary_in_one_message(ws, user):
    a = await opened(ws, "server")
    await a.send_json_to(chat_request("r1", [user_message("u1", "what is the weather?")]))
    frames = await receive_until(a, is_done("r1"))
    kinds = [c["type"] for c in chunks(frames)]
    assert kinds.index("tool-input-available") < kinds.index("tool-output-available") < kinds.index("text-start")
    [reply] = [m for m in await history(user, "server") if m["role"] == "assistant"]
    assert tool_part(reply, "demo_0_0")["state"] == "output-available"
    assert reply["parts"][-1]["text"] == "get_weather returned demo: cloudy, 12°C."


async def test_a_failing_tool_gives_the_model_an_error_and_the_turn_goes_on(ws):
    a = await ws("/agents/tool-agent/t")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool explode {"why": "test"}')]))
    frames = await receive_until(a, is_done("r1"))
    error = next(c for c in chunks(frames) if c["type"] == "tool-output-error")
    assert error["errorText"] == "RuntimeError: exploded: test"
    assert frames[-1] == {"body": "", "done": True, "id": "r1", "type": RESP, "messageIds": ["u1"]}
    assert text_of(frames) == "explode failed: RuntimeError: exploded: test."


async def test_approve_runs_the_tool_in_a_continuation_appended_to_the_same_message(ws, user):
    a = await opened(ws, "approve")
    b = await opened(ws, "approve")
    await a.send_json_to(chat_request("r1", [user_message("u1", EMAIL)]))
    first = await receive_until(a, is_done("r1"))
    request = next(c for c in chunks(first) if c["type"] == "tool-approval-request")
    assert request == {"type": "tool-approval-request", "approvalId": "demo_0_0", "toolCallId": "demo_0_0"}
    assert json.loads(first[-2]["body"])["messageMetadata"] == {"finishReason": "tool-calls"}
    stored = (await history(user, "approve"))[-1]
    assert tool_part(stored, "demo_0_0")["state"] == "approval-requested"
    await receive_until(b, is_done("r1"))

    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": True,
                          "autoContinue": True})
    frames = await follow_continuation(a)
    updated = next(f for f in frames if f["type"] == "cf_agent_message_updated")["message"]
    assert tool_part(updated, "demo_0_0")["state"] == "approval-responded"
    assert tool_part(updated, "demo_0_0")["approval"] == {"id": "demo_0_0", "approved": True}
    assert [f["type"] for f in frames[:2]] == ["cf_agent_stream_pending", "cf_agent_message_updated"] or \
        frames[0]["type"] == "cf_agent_message_updated"
    responses = [f for f in frames if f["type"] == RESP]
    assert all(f.get("continuation") for f in responses)
    assert "messageId" not in chunks(responses)[0]
    assert text_of(frames) == f"send_email returned {SENT}"
    # The other connection sees the continuation live, and ends with the same single reply.
    observed = await receive_until(b, lambda f: f.get("done") is True and f.get("continuation"))
    assert text_of(observed) == f"send_email returned {SENT}"
    messages = await history(user, "approve")
    assert [m["role"] for m in messages] == ["user", "assistant"]
    part = tool_part(messages[-1], "demo_0_0")
    assert part["state"] == "output-available"
    assert part["output"] == SENT
    assert part["approval"] == {"id": "demo_0_0", "approved": True}
    assert messages[-1]["parts"][-1]["text"] == f"send_email returned {SENT}"
    assert observed[-2]["messages"] == messages


async def test_reject_never_runs_the_tool_and_tells_the_model(ws, user):
    a = await opened(ws, "reject")
    await a.send_json_to(chat_request("r1", [user_message("u1", EMAIL)]))
    await receive_until(a, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": False,
                          "autoContinue": True})
    frames = await follow_continuation(a)
    assert "tool-output-available" not in [c["type"] for c in chunks(frames)]
    assert text_of(frames) == "The call to send_email was denied: The tool call was denied."
    part = tool_part((await history(user, "reject"))[-1], "demo_0_0")
    assert part["state"] == "output-denied"
    assert part["approval"] == {"id": "demo_0_0", "approved": False}


async def test_custom_rejection_through_an_output_error(ws, user):
    a = await opened(ws, "custom")
    await a.send_json_to(chat_request("r1", [user_message("u1", EMAIL)]))
    await receive_until(a, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "toolName": "send_email",
                          "state": "output-error", "errorText": "Not to Bob", "autoContinue": True})
    frames = await follow_continuation(a)
    assert text_of(frames) == "send_email failed: Not to Bob."
    part = tool_part((await history(user, "custom"))[-1], "demo_0_0")
    assert (part["state"], part["errorText"]) == ("output-error", "Not to Bob")


async def test_client_tool_result_continues_in_one_message(ws, user):
    a = await opened(ws, "client")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/tool getBrowserInfo")]))
    first = await receive_until(a, is_done("r1"))
    assert [c["type"] for c in chunks(first)][-3:] == ["tool-input-available", "finish-step", "finish"]
    assert tool_part((await history(user, "client"))[-1], "demo_0_0")["state"] == "input-available"
    assert await (await DemoAgent.aget("client", owner=user)).has_pending_interaction()
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "toolName": "getBrowserInfo",
                          "output": {"language": "fr"}, "autoContinue": True})
    frames = await follow_continuation(a)
    assert text_of(frames) == 'getBrowserInfo returned {"language":"fr"}.'
    messages = await history(user, "client")
    assert [m["role"] for m in messages] == ["user", "assistant"]
    part = tool_part(messages[-1], "demo_0_0")
    assert (part["state"], part["output"], part["preliminary"]) == ("output-available", {"language": "fr"}, False)
    assert not await (await DemoAgent.aget("client", owner=user)).has_pending_interaction()


async def test_client_tools_sent_by_the_browser_are_offered_to_the_model(ws, user):
    a = await opened(ws, "browser-tools")
    tools = [{"name": "getLocation", "description": "Where the user is", "parameters": {"type": "object"}}]
    await a.send_json_to(chat_request("r1", [user_message("u1", "/tool getLocation")], clientTools=tools))
    frames = await receive_until(a, is_done("r1"))
    assert any(c.get("toolName") == "getLocation" for c in chunks(frames))
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "toolName": "getLocation",
                          "output": {"city": "Paris"}, "autoContinue": False})
    updated = await a.receive_json_from()
    assert updated["type"] == "cf_agent_message_updated"
    assert await a.receive_nothing(0.2)  # autoContinue false: no continuation


async def test_unknown_duplicate_and_misdirected_answers(ws, user):
    a = await opened(ws, "answers")
    await a.send_json_to(chat_request("r1", [user_message("u1", "what is the weather?")]))
    await receive_until(a, is_done("r1"))
    before = await history(user, "answers")

    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "nope", "output": 1})
    assert (await a.receive_json_from(timeout=5))["code"] == "unknown_tool_call"
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "nope", "approved": True})
    assert (await a.receive_json_from(timeout=5))["code"] == "unknown_tool_call"
    # A server tool's settled call takes neither a result nor an approval.
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "output": "forged"})
    assert (await a.receive_json_from())["code"] == "not_client_tool"
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": True})
    refused = await a.receive_json_from()
    assert refused["code"] == "tool_call_not_waiting"
    assert "output-available" in refused["error"]
    assert await history(user, "answers") == before

    # The same answer twice is a no-op the second time.
    await a.send_json_to(chat_request("r2", [*before, user_message("u2", "/tool getBrowserInfo")]))
    await receive_until(a, is_done("r2"))
    answer = {"type": "cf_agent_tool_result", "toolCallId": "demo_2_0", "toolName": "getBrowserInfo",
              "output": {"a": 1}, "autoContinue": False}
    await a.send_json_to(answer)
    assert (await a.receive_json_from())["type"] == "cf_agent_message_updated"
    await a.send_json_to(answer)
    assert await a.receive_nothing(0.2)
    # A different answer to a settled call is refused.
    await a.send_json_to({**answer, "output": {"a": 2}})
    assert (await a.receive_json_from())["code"] == "tool_call_not_waiting"


async def test_another_instance_cannot_answer_this_ones_calls(ws, user):
    a = await opened(ws, "mine")
    await a.send_json_to(chat_request("r1", [user_message("u1", EMAIL)]))
    await receive_until(a, is_done("r1"))
    other = await opened(ws, "theirs")
    await other.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": True})
    assert (await other.receive_json_from(timeout=5))["code"] == "unknown_tool_call"
    assert tool_part((await history(user, "mine"))[-1], "demo_0_0")["state"] == "approval-requested"


async def test_data_parts_update_in_place_append_and_transient_is_not_stored(ws, user):
    a = await ws("/agents/tool-agent/data")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", "/tool report {}")]))
    frames = await receive_until(a, is_done("r1"))
    sent = [c for c in chunks(frames) if c["type"].startswith("data-")]
    assert [c.get("transient", False) for c in sent] == [False, False, False, True]
    client = AsyncClient()
    await client.aforce_login(user)
    reply = (await client.get("/agents/tool-agent/data/get-messages")).json()[-1]
    data_parts = [p for p in reply["parts"] if p["type"].startswith("data-")]
    assert data_parts == [
        {"type": "data-status", "id": "s1", "data": {"step": 2}},
        {"type": "data-note", "data": {"text": "appended"}},
    ]


async def test_preliminary_results_stream_before_the_output(ws, user):
    a = await opened(ws, "progress")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool crunch_numbers {"count": 3}')]))
    frames = await receive_until(a, is_done("r1"))
    outputs = [c for c in chunks(frames) if c["type"] == "tool-output-available"]
    assert [o.get("preliminary", False) for o in outputs] == [True, True, True, False]
    assert [o["output"]["total"] for o in outputs] == [1, 3, 6, 6]
    part = tool_part((await history(user, "progress"))[-1], "demo_0_0")
    assert part["output"] == {"done": 3, "total": 6}
    assert "preliminary" not in part


async def test_pending_interaction_and_wait_until_stable(ws, user):
    agent = await DemoAgent.aget("stable", owner=user)
    assert not await agent.has_pending_interaction()
    assert await agent.wait_until_stable(timeout=0.1) is True  # nothing pending: at once
    a = await opened(ws, "stable")
    await a.send_json_to(chat_request("r1", [user_message("u1", EMAIL)]))
    await receive_until(a, is_done("r1"))
    assert await agent.has_pending_interaction()
    assert await agent.wait_until_stable(timeout=0.1) is False
    waiter = asyncio.ensure_future(agent.wait_until_stable(timeout=5))
    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": True,
                          "autoContinue": True})
    assert await waiter is True  # after the approval and the continuation it started
    assert not await agent.has_pending_interaction()
    turns = [t async for t in Turn.objects.filter(instance__name="stable").order_by("id")]
    assert [(t.kind, t.status) for t in turns] == [("chat", "completed"), ("continuation", "completed")]


async def test_wait_until_stable_is_false_while_a_turn_runs(ws, user):
    agent = await DemoAgent.aget("busy", owner=user)
    a = await opened(ws, "busy")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 50 10")]))
    await receive_until(a, lambda f: f.get("seq") == 3)
    assert await agent.wait_until_stable(timeout=0.05) is False


async def test_reset_turn_state_aborts_the_running_turn_and_skips_queued_ones(ws, user):
    agent = await DemoAgent.aget("reset", owner=user)
    a = await opened(ws, "reset")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 200 10")]))
    await a.send_json_to(chat_request("r2", [user_message("u1", "/slow 200 10"), user_message("u2", "x")]))
    await receive_until(a, lambda f: f.get("seq") == 3)
    await agent.reset_turn_state()
    frames = await receive_until(a, is_done("r2"))
    assert next(f for f in frames if f.get("id") == "r1" and f.get("done"))["outcome"] == "aborted"
    assert frames[-1]["outcome"] == "skipped"
    assert [m["role"] for m in await history(user, "reset")][:2] == ["user", "user"]


async def test_abort_request_and_abort_all(ws, user):
    agent = await DemoAgent.aget("abort", owner=user)
    a = await opened(ws, "abort")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 200 10")]))
    await receive_until(a, lambda f: f.get("seq") == 3)
    assert await agent.abort_request("r1") is True
    assert (await receive_until(a, is_done("r1")))[-1]["outcome"] == "aborted"
    await a.send_json_to(chat_request("r2", [user_message("u2", "/slow 200 10")]))
    await receive_until(a, lambda f: f.get("id") == "r2" and f.get("seq") == 3)
    assert await agent.abort_all_requests() == 1
    assert (await receive_until(a, is_done("r2")))[-1]["outcome"] == "aborted"
    instance = await AgentInstance.objects.aget(name="abort")
    assert not await Turn.objects.filter(instance=instance, status="running").aexists()
