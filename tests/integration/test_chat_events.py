"""Chat observability events (docs/architecture.md#events): names and payloads, as a dashboard subscribes to them."""

from typing import Any

import pytest

from agents_app import events
from tests.conftest import engine_settled
from tests.support.frames import chat_request, follow_continuation, is_done, open_agent, receive_until, user_message

Seen = list[tuple[str, dict[str, Any]]]
CHAT_EVENTS = ("message:", "tool:", "chat:")

# The chat events only.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.emitted(prefixes=CHAT_EVENTS)]


def without_duration(seen: Seen) -> Seen:
    return [(name, {k: v for k, v in data.items() if k != "durationMs"}) for name, data in seen]


async def turn(ws: Any, path: str, text: str, request_id: str = "r1") -> Any:
    """Run one turn; returns once the turn has ended (its last events come after its terminal frame)."""
    a = await open_agent(ws, path)
    await a.send_json_to(chat_request(request_id, [user_message("u1", text)]))
    await receive_until(a, is_done(request_id))
    await engine_settled()
    return a


async def test_a_turn_that_completes(ws, emitted):
    await turn(ws, "/agents/demo-agent/events", "hello")
    who = {"agent": "demo-agent", "name": "events", "requestId": "r1"}
    turn_of = {**who, "trigger": "chat", "continuation": False, "generation": 0}
    assert without_duration(emitted) == [
        (events.TURN_START, turn_of), (events.MESSAGE_REQUEST, who), (events.MESSAGE_RESPONSE, who),
        (events.TURN_FINISH, {**turn_of, "status": "completed"}),
    ]
    assert isinstance(emitted[-1][1]["durationMs"], int)


async def test_an_in_band_error_is_a_failed_request_at_the_stream_stage(ws, emitted):
    await turn(ws, "/agents/demo-agent/events-fail", "/fail")
    names = [name for name, _ in emitted]
    assert events.MESSAGE_RESPONSE not in names
    failed = dict(emitted)[events.REQUEST_FAILED]
    assert (failed["stage"], failed["messagesPersisted"], failed["requestId"]) == ("stream", True, "r1")
    assert dict(emitted)[events.MESSAGE_ERROR]["error"] == failed["error"]
    assert dict(emitted)[events.TURN_FINISH]["status"] == "error"


async def test_an_agent_that_raises_is_a_failed_request_at_the_turn_stage(ws, emitted):
    await turn(ws, "/agents/broken-agent/events", "hi")
    failed = dict(emitted)[events.REQUEST_FAILED]
    assert (failed["stage"], failed["error"]) == ("turn", "agent exploded")


async def test_a_refused_request_is_a_failed_request_at_the_persist_stage(ws, emitted):
    a = await turn(ws, "/agents/demo-agent/events-dup", "hello")
    await a.send_json_to(chat_request("r1", [user_message("u1", "hello"), user_message("u2", "again")]))
    assert (await a.receive_json_from())["code"] == "duplicate_request_id"
    failed = dict(emitted)[events.REQUEST_FAILED]
    assert (failed["stage"], failed["messagesPersisted"], failed["requestId"]) == ("persist", False, "r1")


async def test_clear_and_cancel(ws, emitted):
    a = await open_agent(ws, "/agents/demo-agent/events-clear")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 50 20")]))
    await receive_until(a, lambda f: '"w1 "' in f.get("body", ""))
    await a.send_json_to({"type": "cf_agent_chat_request_cancel", "id": "r1"})
    await receive_until(a, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_chat_clear"})
    await a.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p"})
    await receive_until(a, lambda f: f.get("probeId") == "p")
    await engine_settled()
    who = {"agent": "demo-agent", "name": "events-clear"}
    assert (events.MESSAGE_CANCEL, {**who, "requestId": "r1"}) in emitted
    assert (events.MESSAGE_CLEAR, who) in emitted
    assert dict(emitted)[events.TURN_FINISH]["status"] == "aborted"


async def test_tool_results_and_approvals(ws, emitted):
    a = await turn(ws, "/agents/demo-agent/events-tools", "/tool getBrowserInfo")
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "toolName": "getBrowserInfo",
                          "output": {"language": "fr"}, "autoContinue": True})
    await follow_continuation(a)
    b = await turn(ws, "/agents/demo-agent/events-approval", '/tool send_email {"to": "bob", "subject": "hi"}')
    await b.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "demo_0_0", "approved": False,
                          "autoContinue": True})
    await follow_continuation(b)
    await engine_settled()
    assert (events.TOOL_RESULT, {"agent": "demo-agent", "name": "events-tools", "toolCallId": "demo_0_0",
                                 "toolName": "getBrowserInfo"}) in emitted
    assert (events.TOOL_APPROVAL, {"agent": "demo-agent", "name": "events-approval", "toolCallId": "demo_0_0",
                                   "approved": False}) in emitted
    continuation = [data for name, data in emitted if name == events.TURN_START and data["name"] == "events-tools"][-1]
    assert (continuation["trigger"], continuation["continuation"]) == ("continuation", True)
