"""The direct first model request (``agents_app.llm.direct``) sends the model what an agent run
would, and the client sees the same frames: each turn runs once with ``AGENT_DIRECT_FIRST_STEP``
on and once with it off, and what the model received and what the client read are compared."""

import dataclasses
from typing import Any

import pytest
from django.test import override_settings
from pydantic_ai.messages import ModelRequest, ModelResponse

from agents_app.llm import direct
from tests.agents import RECORDED
from tests.support.frames import chat_request, is_done, normalize, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_TOOLS = [{"name": "getLocation", "description": "Where the user is", "parameters": {"type": "object"}}]

# One turn of each shape: text; a server tool, then text; a tool that asks for approval; an
# action; a tool that reports progress; a tool of the agent that runs in the browser; one the
# browser declared; a sub-agent as a tool; a model that fails mid-reply.
PROMPTS = [
    "hello there",
    "get_weather city Oslo",
    '/tool send_email {"to": "bob@example.com", "subject": "hi"}',
    "refund_order order_id A1 amount 50",
    "crunch_numbers count 3",
    "/tool getBrowserInfo",
    "/tool getLocation",
    'research task "the history of Oslo"',
    "/fail",
]


def _part(part: Any) -> tuple[Any, ...]:
    kind = type(part).__name__
    if kind in ("ToolCallPart", "ToolReturnPart"):
        return kind, part.tool_name, part.tool_call_id, getattr(part, "args", None), getattr(part, "content", None)
    return kind, getattr(part, "content", None)


def _asked(calls: list[tuple[list[Any], Any]]) -> list[Any]:
    """What the model was asked, request by request: messages (without timestamps and run ids),
    instructions, settings and every public request parameter (tools, output mode, ...)."""
    asked = []
    for messages, info in calls:
        history = [(type(m).__name__, m.instructions if isinstance(m, ModelRequest) else None,
                    [_part(p) for p in m.parts]) for m in messages if isinstance(m, ModelRequest | ModelResponse)]
        parameters = {f.name: getattr(info.model_request_parameters, f.name)
                      for f in dataclasses.fields(info.model_request_parameters) if not f.name.startswith("_")}
        asked.append((history, info.instructions, info.model_settings, parameters))
    return asked


async def _turn(ws: Any, user: Any, name: str, prompt: str, agent: str = "recording-agent") -> list[dict[str, Any]]:
    a = await ws(f"/agents/{agent}/{name}", as_user=user)
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", prompt)], clientTools=CLIENT_TOOLS))
    return await receive_until(a, is_done("r1"))


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[direct.FirstStep]:
    """The first steps made directly during the test."""
    made: list[direct.FirstStep] = []
    events = direct.FirstStep.events

    def counted(step: direct.FirstStep) -> Any:
        made.append(step)
        return events(step)

    monkeypatch.setattr(direct.FirstStep, "events", counted)
    return made


@pytest.mark.parametrize("index", range(len(PROMPTS)))
async def test_the_model_is_asked_the_same_and_the_client_reads_the_same(ws, user, index, steps):
    prompt = PROMPTS[index]
    with override_settings(AGENT_DIRECT_FIRST_STEP=False):
        agent_run = await _turn(ws, user, f"run-{index}", prompt)
    assert not steps
    with override_settings(AGENT_DIRECT_FIRST_STEP=True):
        first = await _turn(ws, user, f"direct-{index}", prompt)
    assert len(steps) == 1, "the first request was not made directly"
    assert _asked(RECORDED[f"direct-{index}"]) == _asked(RECORDED[f"run-{index}"])
    assert normalize(first) == normalize(agent_run)


async def test_an_agent_that_builds_its_own_pydantic_agent_runs_it_whole(ws, user, steps):
    frames = await _turn(ws, user, "custom", "hello there", agent="custom-build-agent")
    assert not steps
    assert text_of(frames) == "(demo model, offline) You said: hello there"
