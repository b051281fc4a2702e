"""``before_step`` (Think's ``beforeStep``) with ``prune_messages``, through real turns (docs/architecture.md#pruning).

The agent is the demo agent whose model records every request it gets (``RecordingAgent``), so
the tests read what each model request really carried.
"""

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import override_settings
from pydantic_ai.messages import ToolCallPart, ToolReturnPart

from agents_app import transcript
from agents_app.models import AgentInstance
from agents_app.pruning import prune_messages
from agents_app.steps import StepConfig, StepContext
from tests.agents import RECORDED, RecordingAgent

pytestmark = pytest.mark.django_db(transaction=True)

STEPS: dict[str, list[StepContext]] = {}
# What StepAgent answers, by instance name.
ANSWERS: dict[str, Any] = {}


class StepAgent(RecordingAgent):
    """Records each step's context and answers what ``ANSWERS[name]`` says (a function of the context)."""

    async def before_step(self, ctx: StepContext) -> StepConfig | None:
        STEPS.setdefault(self.name, []).append(ctx)
        answer = ANSWERS.get(self.name)
        return answer(ctx) if answer is not None else None


with_step_agent = override_settings(AGENT_CLASSES=[*settings.AGENT_CLASSES,
                                                   "tests.integration.test_before_step.StepAgent"])


@pytest.fixture(autouse=True)
def fresh() -> Any:
    for store in (STEPS, ANSWERS, RECORDED):
        store.clear()
    yield
    for store in (STEPS, ANSWERS, RECORDED):
        store.clear()


def tool_parts(messages: list[Any]) -> list[str]:
    return [p.tool_call_id for m in messages for p in m.parts if isinstance(p, ToolCallPart | ToolReturnPart)]


async def run(name: str, prompt: str) -> None:
    result = await (await StepAgent.aget(name)).save_messages([prompt])
    assert result.status == "completed", result


@with_step_agent
async def test_before_step_runs_before_every_model_request_with_the_step_number():
    """The hook runs before each model call of the turn's agentic loop, numbered from zero, and sees the
    messages about to be sent: a tool call, then its result on the next step.
    """
    await run("s1", "/tool get_weather city Oslo")
    steps = STEPS["s1"]
    assert [s.step_number for s in steps] == [0, 1]
    assert tool_parts(steps[0].messages) == [] and len(tool_parts(steps[1].messages)) == 2
    assert len(RECORDED["s1"]) == 2


@with_step_agent
async def test_pruned_messages_are_what_the_model_is_sent_and_the_transcript_keeps_everything():
    """Pruning old tool calls in the step hook changes what the model reads on that step only; the stored
    conversation keeps them (the reference prunes the model's context, not the history).
    """
    await run("s2", "/tool get_weather city Oslo")
    ANSWERS["s2"] = lambda ctx: StepConfig(messages=prune_messages(ctx.messages, tool_calls="before-last-message"))
    await run("s2", "Thanks")
    sent, _info = RECORDED["s2"][-1]
    assert tool_parts(STEPS["s2"][-1].messages) != [] and tool_parts(sent) == []
    instance = await AgentInstance.objects.aget(slug=StepAgent.slug(), name="s2")
    stored = await database_sync_to_async(transcript.load)(instance)
    assert any(p.get("toolCallId") for m in stored for p in m.get("parts", []))


@with_step_agent
async def test_active_tools_limits_the_tools_offered_on_that_step():
    """A step may offer the model fewer tools (``activeTools``); the others are not shown to it."""
    ANSWERS["s3"] = lambda ctx: StepConfig(active_tools=["get_weather"])
    await run("s3", "hello")
    _sent, info = RECORDED["s3"][0]
    assert [tool.name for tool in info.function_tools] == ["get_weather"]


@with_step_agent
async def test_a_hook_that_returns_something_else_fails_the_turn_with_a_clear_error():
    """The reference's step hook returns the step's settings or nothing. Anything else (here a plain
    dict) is a mistake in the agent: the turn fails with an error naming the hook and what it
    must return, rather than running the step with the value ignored."""
    ANSWERS["s4"] = lambda ctx: {"messages": []}
    result = await (await StepAgent.aget("s4")).save_messages(["hello"])
    assert result.status == "error" and "before_step returns a StepConfig or None" in (result.error or "")


async def test_the_readme_example_runs_as_written(user):
    """The README's ``before_step`` example, as written, prunes and answers."""
    from tests.integration.test_readme_example import readme_module

    with readme_module("What the model is sent can be less than what is stored", "readme_pruning",
                       "PruningAgent") as module:
        handle = await module.PruningAgent.aget("readme", owner=user)
        for prompt in ("hello", "and again"):
            assert (await handle.save_messages([prompt])).status == "completed"
        stored = await database_sync_to_async(transcript.load)(handle.instance)
        assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
