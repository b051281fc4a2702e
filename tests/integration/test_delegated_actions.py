"""``delegated-agent`` actions: a sub-agent turn under the action's rules.

docs/architecture.md#delegated-agent-actions.

The reference's actions design: an action of this kind delegates to a sub-agent. Here the
sub-agent is ``tests.agents.ChildAgent`` on the offline demo model, run for real (its own instance
under the parent, its own turn and transcript).
"""

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import override_settings
from pydantic import BaseModel

from agents_app import ChatAgent, transcript
from agents_app.actions import Action, action
from agents_app.actions.context import TurnContext
from agents_app.agent_tools import delegate_to
from agents_app.models import AgentInstance, LedgerEntry, Turn
from tests.agents import ChildAgent
from tests.support.frames import message_text
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)

ECHO = "(demo model, offline) You said: "


class Topic(BaseModel):
    topic: str


RESEARCH = action(description="Research a topic with the research assistant", input_schema=Topic,
                  execute=delegate_to(ChildAgent, task=lambda input: input.topic),
                  permissions=["research:run"], idempotency_key=lambda input, ctx: f"topic:{input.topic}")


SLOW = action(description="Hand a slow task to the assistant", input_schema=Topic, timeout_ms=300,
              execute=delegate_to(ChildAgent, task=lambda input: "/slow 300 20"))


class DelegatingAgent(ChatAgent):
    """Hands tasks to a sub-agent through delegated actions; grants ``research:run`` except to "denied*"."""

    def get_actions(self) -> dict[str, Action[Any]]:
        return {"research": RESEARCH, "slow": SLOW}

    async def authorize_turn(self, turn: TurnContext) -> dict[str, Any]:
        return {"allowed": True, "granted_permissions": [] if self.name.startswith("denied") else ["research:run"]}


with_delegating_agent = override_settings(AGENT_CLASSES=[
    *settings.AGENT_CLASSES, "tests.integration.test_delegated_actions.DelegatingAgent"])


def research_part(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return next(p for m in messages for p in m.get("parts", []) if p.get("type") == "tool-research")


async def run(name: str, prompt: str, user: Any) -> list[dict[str, Any]]:
    handle = await DelegatingAgent.aget(name, owner=user)
    result = await handle.save_messages([prompt])
    assert result.status == "completed", result
    return await database_sync_to_async(transcript.load)(handle.instance)


@with_delegating_agent
async def test_a_delegated_action_runs_a_sub_agent_turn_and_returns_its_reply(user):
    """The model's call runs a turn of a sub-agent of the parent, on the task made from the input; what the
    sub-agent answers is the action's output. The call is ledgered like any action: its key is settled.
    """
    messages = await run("d1", '/tool research {"topic": "the history of Oslo"}', user)
    assert research_part(messages)["output"] == ECHO + "the history of Oslo"
    parent = await AgentInstance.objects.aget(slug=DelegatingAgent.slug(), name="d1")
    [child] = [c async for c in AgentInstance.objects.filter(parent=parent)]
    assert child.slug == "child-agent" and child.name == f"research-{research_part(messages)['toolCallId']}"
    stored = await database_sync_to_async(transcript.load)(child)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    assert message_text(stored[0]) == "the history of Oslo" and stored[0]["metadata"]["agent"] == DelegatingAgent.slug()
    [row] = [r async for r in LedgerEntry.objects.filter(scope=str(parent.pk))]
    assert (row.key, row.status) == ("action:research:topic:the history of Oslo", "settled")


@with_delegating_agent
async def test_the_same_key_replays_the_sub_agents_answer_without_a_second_turn(user):
    """A second call with the same idempotency key gets the stored answer: no second sub-agent runs."""
    await run("d2", '/tool research {"topic": "tides"}', user)
    messages = await run("d2", '/tool research {"topic": "tides"}', user)
    outputs = [p["output"] for m in messages for p in m.get("parts", []) if p.get("type") == "tool-research"]
    assert outputs == [ECHO + "tides"] * 2
    parent = await AgentInstance.objects.aget(slug=DelegatingAgent.slug(), name="d2")
    assert await AgentInstance.objects.filter(parent=parent).acount() == 1


@with_delegating_agent
async def test_an_unauthorized_delegation_never_starts_the_sub_agent(user):
    """Authorization comes first: a call without its permission gets the authorization error, no sub-agent."""
    messages = await run("denied", '/tool research {"topic": "secrets"}', user)
    assert research_part(messages)["output"]["error"]["name"] == "ActionAuthorizationError"
    parent = await AgentInstance.objects.aget(slug=DelegatingAgent.slug(), name="denied")
    assert not await AgentInstance.objects.filter(parent=parent).aexists()


@with_delegating_agent
async def test_the_actions_timeout_cancels_the_sub_agents_turn(user):
    """The action's rules hold around the sub-agent: past ``timeout_ms`` the model gets the timeout error, and
    the action's signal cancels the sub-agent's turn, which ends aborted rather than running on.
    """
    messages = await run("d3", '/tool slow {"topic": "x"}', user)
    output = next(p for m in messages for p in m.get("parts", []) if p.get("type") == "tool-slow")["output"]
    assert output == {"error": {"name": "Error", "message": "Action timed out after 300ms"}}
    parent = await AgentInstance.objects.aget(slug=DelegatingAgent.slug(), name="d3")
    child = await AgentInstance.objects.aget(parent=parent)

    async def child_turn_ended() -> Turn | None:
        turn = await Turn.objects.of(child).alast()
        return turn if turn is not None and turn.status not in ("queued", "running") else None

    ended = await eventually(child_turn_ended, "the sub-agent's turn to end", timeout=30)
    assert ended.status == Turn.Status.ABORTED
