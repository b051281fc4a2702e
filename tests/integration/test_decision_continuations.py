"""Where the model's reaction to a staff decision goes, what it says, and what agents are told.

Two ``deploy_release`` calls of the demo agent park in one conversation; staff decide the older
one. Its outcome belongs to the message that holds its call; since a later reply exists, the
reaction is a new assistant message marked (metadata ``continuationOf``) as that call's
continuation, and it speaks of that call, in words. Continuations run inline in the test
settings, before the decision returns.
"""

from typing import Any

import pytest
from channels.db import database_sync_to_async

from agents_app import transcript
from agents_app.approvals import service as approvals
from agents_app.demo.agents import DemoAgent

pytestmark = pytest.mark.django_db(transaction=True)

Messages = list[dict[str, Any]]
PARKED_NOTE = "Asked staff to approve deploy_release."


def texts(message: dict[str, Any]) -> list[str]:
    return [p["text"] for p in message["parts"] if p["type"] == "text"]


def holder(messages: Messages, tool_call_id: str) -> dict[str, Any]:
    return next(m for m in messages if any(p.get("toolCallId") == tool_call_id for p in m["parts"]))


def continuation_of(messages: Messages, tool_call_id: str) -> list[str]:
    """The model's words about the call: after it in its own message, or in a message marked as its continuation."""
    own = holder(messages, tool_call_id)
    after = own["parts"][[p.get("toolCallId") for p in own["parts"]].index(tool_call_id) + 1:]
    words = [p["text"] for p in after if p["type"] == "text"][1:]  # the first is the parking turn's own
    for message in messages:
        marked = (message.get("metadata") or {}).get("continuationOf") or {}
        if message["role"] == "assistant" and marked.get("toolCallId") == tool_call_id:
            assert message["metadata"]["continuation"] is True
            words += texts(message)
    return words


async def two_parked_deploys(user: Any, name: str) -> tuple[Any, list[dict[str, Any]]]:
    agent = await DemoAgent.aget(name, owner=user)
    for version in ("1.0.0", "2.0.0"):
        assert (await agent.save_messages([f"deploy_release version {version}"])).status == "completed"
    pending = await agent.pending_approvals()
    assert [p["descriptor"]["input"]["version"] for p in pending] == ["1.0.0", "2.0.0"]
    return agent, pending


async def load(agent: Any) -> Messages:
    return await database_sync_to_async(transcript.load)(agent.instance)


async def test_approving_the_older_of_two_parked_deploys_continues_about_that_deploy(user):
    agent, [first, second] = await two_parked_deploys(user, "two-deploys")
    outcome = await approvals.approve_execution(first["executionId"])
    assert "1.0.0" in outcome

    messages = await load(agent)
    first_call, second_call = first["descriptor"]["toolCallId"], second["descriptor"]["toolCallId"]
    assert next(p for p in holder(messages, first_call)["parts"] if p.get("toolCallId") == first_call)["output"] \
        == outcome
    assert continuation_of(messages, first_call) == [outcome]
    # The later reply is left as it was: nothing about the first deploy lands there.
    assert texts(holder(messages, second_call)) == [PARKED_NOTE]
    assert sum(PARKED_NOTE in t for m in messages for t in texts(m)) == 2
    assert (await agent.pending_approvals())[0]["executionId"] == second["executionId"]


async def test_rejecting_the_older_of_two_parked_deploys_says_so_in_words(user):
    agent, [first, _] = await two_parked_deploys(user, "two-deploys-rejected")
    await approvals.reject_execution(first["executionId"], "Not on a Friday")

    messages = await load(agent)
    assert continuation_of(messages, first["descriptor"]["toolCallId"]) == [
        "Staff rejected deploy_release: Not on a Friday."]


async def test_approving_the_latest_parked_call_continues_its_own_message_in_words(user):
    agent, [_, second] = await two_parked_deploys(user, "latest-deploy")
    outcome = await approvals.approve_execution(second["executionId"])

    messages = await load(agent)
    call = second["descriptor"]["toolCallId"]
    assert messages[-1] is holder(messages, call)
    assert texts(messages[-1]) == [PARKED_NOTE, outcome]
    assert not any((m.get("metadata") or {}).get("continuationOf") for m in messages)
