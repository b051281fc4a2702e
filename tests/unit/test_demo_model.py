"""The offline demo model's grammar, exercised through real pydantic-ai agent runs.

Every test builds ``Agent(build_demo_model(), tools=[...])`` and runs it (``agent.run`` for the
non-streamed path, ``agent.run_stream_events`` for the streamed one), so the model's plan, its two
entry points (request and stream function), pydantic-ai's tool loop and the approval/deferred
paths are all covered together.
"""

import json
import time
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelRetry,
    PartDeltaEvent,
    PartStartEvent,
    Tool,
    ToolDenied,
)
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolCallPartDelta,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset
from pydantic_ai.usage import UsageLimits

from agents_app.llm.demo import (
    ECHO_PREFIX,
    MAX_WORDS,
    MODEL_NAME,
    DemoModelError,
    build_demo_model,
    numbered_word,
    plan,
)

WEATHER = {"oslo": "snow", "paris": "sunny"}


def get_weather(city: str) -> str:
    """Weather in a city."""
    return f"{city}: {WEATHER.get(city.lower(), 'cloudy')}"


def send_email(to: str, subject: str) -> str:
    """Send an email."""
    return f"sent to {to}"


def plan_trip(city: str, days: int, budget: float, flexible: bool, stops: list[str],
              prefs: dict[str, str], note: str = "none") -> str:
    """Plan a trip (one parameter of each JSON type; ``note`` is optional)."""
    return json.dumps({"city": city, "days": days, "budget": budget, "flexible": flexible,
                       "stops": stops, "prefs": prefs, "note": note}, sort_keys=True)


def flaky(city: str) -> str:
    """Always asks the model to retry."""
    raise ModelRetry(f"no data for {city}")


def demo_agent(*tools: Any, delay: float = 0.0, **kwargs: Any) -> Agent[None, Any]:
    return Agent(build_demo_model(delay=delay), tools=list(tools), **kwargs)


async def stream(agent: Agent[None, Any], prompt: str | None, **kwargs: Any) -> list[Any]:
    """Every event of a streamed run, including the final ``AgentRunResultEvent``."""
    async with agent.run_stream_events(prompt, **kwargs) as events:
        return [event async for event in events]


def text_deltas(events: list[Any]) -> list[str]:
    """The streamed text, piece by piece (the part start's content, then each delta)."""
    pieces = []
    for event in events:
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            pieces.append(event.part.content)
        elif isinstance(event, PartDeltaEvent) and hasattr(event.delta, "content_delta"):
            pieces.append(event.delta.content_delta)
    return pieces


def final_output(events: list[Any]) -> Any:
    assert isinstance(events[-1], AgentRunResultEvent)
    return events[-1].result.output


def tool_calls_of(messages: list[Any]) -> list[ToolCallPart]:
    return [p for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, ToolCallPart)]


# --- identity -----------------------------------------------------------------------------------------
def test_model_name() -> None:
    assert build_demo_model().model_name == MODEL_NAME == "demo-offline"


# --- echo -----------------------------------------------------------------------------------------------
async def test_echo() -> None:
    result = await demo_agent(get_weather).run("hello there")
    assert result.output == f"{ECHO_PREFIX}hello there" == "(demo model, offline) You said: hello there"


async def test_echo_of_an_empty_prompt() -> None:
    result = await demo_agent().run("")
    assert result.output == f"{ECHO_PREFIX}nothing"


async def test_echo_streams_word_by_word() -> None:
    events = await stream(demo_agent(get_weather), "hello   there, friend")
    pieces = text_deltas(events)
    expected = f"{ECHO_PREFIX}hello   there, friend"
    assert "".join(pieces) == expected == final_output(events)
    # One piece per word, each keeping the whitespace that follows it.
    assert pieces == ["(demo ", "model, ", "offline) ", "You ", "said: ", "hello   ", "there, ", "friend"]


async def test_delay_spaces_the_words() -> None:
    started = time.monotonic()
    events = await stream(demo_agent(delay=0.02), "one two three")
    elapsed = time.monotonic() - started
    assert len(text_deltas(events)) == 8  # 5 words of the prefix, 3 of the prompt
    assert elapsed >= 8 * 0.02 * 0.9


async def test_non_streamed_run_ignores_the_delay() -> None:
    started = time.monotonic()
    result = await demo_agent(delay=1.0).run("hi")
    assert result.output == f"{ECHO_PREFIX}hi"
    assert time.monotonic() - started < 1.0


async def test_output_is_deterministic() -> None:
    first = await demo_agent(get_weather).run("/tool get_weather {\"city\": \"Oslo\"}")
    second = await demo_agent(get_weather).run("/tool get_weather {\"city\": \"Oslo\"}")
    assert first.output == second.output
    assert [c.tool_call_id for c in tool_calls_of(first.all_messages())] == ["demo_0_0"]
    assert [m.parts for m in first.all_messages() if isinstance(m, ModelResponse)] == [
        m.parts for m in second.all_messages() if isinstance(m, ModelResponse)
    ]


# --- /tool NAME {json} ------------------------------------------------------------------------------------
async def test_slash_tool_calls_the_tool_with_the_given_arguments() -> None:
    result = await demo_agent(get_weather, send_email).run('/tool get_weather {"city": "Oslo"}')
    assert result.output == "get_weather returned Oslo: snow."
    [call] = tool_calls_of(result.all_messages())
    assert (call.tool_name, call.args_as_dict(), call.tool_call_id) == ("get_weather", {"city": "Oslo"}, "demo_0_0")


async def test_slash_tool_streams_the_arguments_in_slices() -> None:
    raw = '{"city": "Paris", "unused": "padding to make several slices"}'
    agent = demo_agent(Tool(lambda city, unused: f"{city}/{unused}", name="get_weather"))
    events = await stream(agent, f"/tool get_weather {raw}")

    start = next(e for e in events if isinstance(e, PartStartEvent))
    assert isinstance(start.part, ToolCallPart)
    assert (start.part.tool_name, start.part.tool_call_id) == ("get_weather", "demo_0_0")
    deltas = [e.delta.args_delta for e in events
              if isinstance(e, PartDeltaEvent) and isinstance(e.delta, ToolCallPartDelta)]
    assert "".join(str(d) for d in deltas) == raw
    assert [len(str(d)) for d in deltas[:-1]] == [8] * (len(deltas) - 1)
    assert len(deltas) == -(-len(raw) // 8)

    [call_event] = [e for e in events if isinstance(e, FunctionToolCallEvent)]
    assert call_event.part.args_as_dict() == {"city": "Paris", "unused": "padding to make several slices"}
    [result_event] = [e for e in events if isinstance(e, FunctionToolResultEvent)]
    assert result_event.part.content == "Paris/padding to make several slices"
    assert "".join(text_deltas(events)) == final_output(events) == (
        "get_weather returned Paris/padding to make several slices."
    )


async def test_slash_tool_without_arguments_sends_an_empty_object() -> None:
    def now() -> str:
        """The time."""
        return "noon"

    result = await demo_agent(now).run("/tool now")
    assert result.output == "now returned noon."
    assert tool_calls_of(result.all_messages())[0].args_as_dict() == {}


async def test_slash_tool_with_multiline_json() -> None:
    result = await demo_agent(get_weather).run('/tool get_weather {\n  "city": "Paris"\n}\n')
    assert result.output == "get_weather returned Paris: sunny."


async def test_slash_tool_with_a_hyphenated_name() -> None:
    agent = demo_agent(Tool(get_weather, name="weather-now"))
    result = await agent.run('/tool weather-now {"city": "Oslo"}')
    assert result.output == "weather-now returned Oslo: snow."


async def test_unknown_tool_lists_the_available_ones() -> None:
    result = await demo_agent(send_email, get_weather).run("/tool nope")
    assert result.output == "Unknown tool 'nope'. Available: get_weather, send_email."
    assert tool_calls_of(result.all_messages()) == []


async def test_unknown_tool_without_any_tools() -> None:
    events = await stream(demo_agent(), '/tool nope {"a": 1}')
    assert final_output(events) == "Unknown tool 'nope'. Available: none."
    assert "".join(text_deltas(events)) == final_output(events)


async def test_call_ids_count_the_responses_of_the_conversation() -> None:
    agent = demo_agent(get_weather)
    first = await agent.run('/tool get_weather {"city": "Oslo"}')
    second = await agent.run('/tool get_weather {"city": "Paris"}', message_history=first.all_messages())
    ids = [c.tool_call_id for c in tool_calls_of(second.all_messages())]
    assert ids == ["demo_0_0", "demo_2_0"]
    assert second.output == "get_weather returned Paris: sunny."


# --- name-token matching ---------------------------------------------------------------------------------
async def test_a_word_of_a_tool_name_calls_it_with_schema_arguments() -> None:
    result = await demo_agent(send_email, get_weather).run("What is the WEATHER like?")
    [call] = tool_calls_of(result.all_messages())
    assert (call.tool_name, call.args_as_dict()) == ("get_weather", {"city": "demo"})
    assert result.output == "get_weather returned demo: cloudy."


async def test_the_full_tool_name_matches() -> None:
    result = await demo_agent(get_weather).run("please run get_weather")
    assert tool_calls_of(result.all_messages())[0].tool_name == "get_weather"


async def test_short_tokens_do_not_match() -> None:
    # "get" is a word of get_weather but shorter than 4 letters; "weathering" is not the word "weather".
    result = await demo_agent(get_weather).run("get me the weathering report")
    assert tool_calls_of(result.all_messages()) == []
    assert result.output == f"{ECHO_PREFIX}get me the weathering report"


async def test_hyphenated_tool_name_tokens_match() -> None:
    result = await demo_agent(Tool(get_weather, name="city-forecast")).run("any forecast?")
    [call] = tool_calls_of(result.all_messages())
    assert (call.tool_name, call.args_as_dict()) == ("city-forecast", {"city": "demo"})


async def test_schema_arguments_cover_every_json_type() -> None:
    result = await demo_agent(plan_trip).run("plan a trip")
    [call] = tool_calls_of(result.all_messages())
    # Required parameters only (``note`` has a default), one placeholder per JSON type.
    assert call.args_as_dict() == {
        "city": "demo", "days": 1, "budget": 1.0, "flexible": True, "stops": [], "prefs": {},
    }
    expected = plan_trip("demo", 1, 1.0, True, [], {})
    assert result.output == f"plan_trip returned {expected}."


async def test_the_prompt_gives_arguments_by_name() -> None:
    """``NAME VALUE``, ``NAME: VALUE``, ``NAME=VALUE``; quoted strings; typed by the schema; others made up."""
    result = await demo_agent(plan_trip).run(
        "plan_trip city Oslo, days: 3 budget=99.5 flexible no note 'window seat' stops x"
    )
    [call] = tool_calls_of(result.all_messages())
    assert call.args_as_dict() == {
        "city": "Oslo", "days": 3, "budget": 99.5, "flexible": False, "stops": [], "prefs": {}, "note": "window seat",
    }


async def test_the_send_email_demo_takes_what_the_user_typed() -> None:
    agent = demo_agent(Tool(send_email, requires_approval=True), output_type=[str, DeferredToolRequests])
    result = await agent.run('send an email to bob@example.com subject "Lunch on Friday"')
    [call] = result.output.approvals
    assert call.args_as_dict() == {"to": "bob@example.com", "subject": "Lunch on Friday"}


async def test_a_value_that_is_not_of_the_type_falls_back_to_the_made_up_one() -> None:
    result = await demo_agent(plan_trip).run("plan_trip days many")
    assert tool_calls_of(result.all_messages())[0].args_as_dict()["days"] == 1


async def test_a_parked_call_is_reported_in_words_not_as_its_envelope() -> None:
    def deploy(version: str) -> dict[str, str]:
        """Deploy a release."""
        return {"status": "paused", "executionId": "actpause_1", "message": "Stop and wait for the approval result."}

    result = await demo_agent(deploy).run("deploy version 1.4.2")
    assert result.output == "Asked staff to approve deploy."


async def test_name_match_streams_tool_deltas() -> None:
    events = await stream(demo_agent(get_weather), "weather please")
    [call_event] = [e for e in events if isinstance(e, FunctionToolCallEvent)]
    assert call_event.part.args_as_dict() == {"city": "demo"}
    assert final_output(events) == "get_weather returned demo: cloudy."


# --- /slow and /burst --------------------------------------------------------------------------------------
async def test_slow_streams_numbered_words_with_the_given_delay() -> None:
    started = time.monotonic()
    events = await stream(demo_agent(), "/slow 4 25")
    elapsed = time.monotonic() - started
    assert text_deltas(events) == ["w0 ", "w1 ", "w2 ", "w3 "]
    assert [numbered_word(i) for i in range(4)] == text_deltas(events)
    assert elapsed >= 4 * 0.025 * 0.9


async def test_slow_defaults_to_50_ms() -> None:
    started = time.monotonic()
    events = await stream(demo_agent(), "/slow 3")
    assert final_output(events) == "w0 w1 w2 "
    assert time.monotonic() - started >= 3 * 0.05 * 0.9


async def test_slow_without_streaming_returns_all_words_at_once() -> None:
    result = await demo_agent().run("/slow 3 1000")
    assert result.output == "w0 w1 w2 "


async def test_burst_streams_without_delay() -> None:
    started = time.monotonic()
    events = await stream(demo_agent(delay=1.0), "/burst 500")
    assert text_deltas(events) == [numbered_word(i) for i in range(500)]
    assert time.monotonic() - started < 1.0


async def test_burst_is_capped() -> None:
    result = await demo_agent().run(f"/burst {MAX_WORDS * 10}")
    assert result.output.split() == [f"w{i}" for i in range(MAX_WORDS)]


async def test_malformed_commands_echo() -> None:
    for prompt in ["/slow", "/slow many", "/burst 5 6", "/toolnope", "/fail now"]:
        result = await demo_agent(get_weather).run(prompt)
        assert result.output == f"{ECHO_PREFIX}{prompt}", prompt


# --- /fail ------------------------------------------------------------------------------------------------
async def test_fail_streams_some_words_then_raises() -> None:
    seen: list[Any] = []

    async def consume() -> None:
        async with demo_agent().run_stream_events("/fail") as events:
            async for event in events:
                seen.append(event)

    with pytest.raises(DemoModelError, match="failed on purpose"):
        await consume()
    assert "".join(text_deltas(seen)) == "This reply will fail "


async def test_fail_without_streaming_raises() -> None:
    with pytest.raises(DemoModelError, match="failed on purpose"):
        await demo_agent().run("/fail")


# --- summaries of tool results -------------------------------------------------------------------------------
async def test_summary_of_a_structured_result() -> None:
    def locate() -> dict[str, int]:
        """Where am I."""
        return {"lat": 1, "lon": 2}

    result = await demo_agent(locate).run("/tool locate")
    assert result.output == 'locate returned {"lat":1,"lon":2}.'


async def test_summary_of_a_tool_asking_for_a_retry() -> None:
    result = await demo_agent(flaky).run('/tool flaky {"city": "Atlantis"}')
    assert result.output.startswith("flaky failed: no data for Atlantis")
    assert result.output.endswith(".")


async def test_summary_of_a_denied_approval() -> None:
    agent = demo_agent(Tool(send_email, requires_approval=True), output_type=[str, DeferredToolRequests])
    paused = await agent.run("please send an email")
    assert isinstance(paused.output, DeferredToolRequests)
    [approval] = paused.output.approvals
    assert approval.tool_name == "send_email"
    assert approval.args_as_dict() == {"to": "demo", "subject": "demo"}

    events = await stream(
        agent, None, message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={approval.tool_call_id: ToolDenied("not today")}),
    )
    assert final_output(events) == "The call to send_email was denied: not today."
    assert "".join(text_deltas(events)) == final_output(events)


async def test_summary_of_an_approved_call() -> None:
    agent = demo_agent(Tool(send_email, requires_approval=True), output_type=[str, DeferredToolRequests])
    paused = await agent.run('/tool send_email {"to": "bob", "subject": "hi"}')
    assert isinstance(paused.output, DeferredToolRequests)
    [approval] = paused.output.approvals
    resumed = await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={approval.tool_call_id: True}),
    )
    assert resumed.output == "send_email returned sent to bob."


async def test_client_tool_call_and_its_result() -> None:
    client_tools = ExternalToolset([ToolDefinition(
        name="get_location", description="The browser's location.",
        parameters_json_schema={"type": "object", "properties": {}},
    )])
    agent = Agent(build_demo_model(), toolsets=[client_tools], output_type=[str, DeferredToolRequests])
    paused = await agent.run("where am I? use get location")
    assert isinstance(paused.output, DeferredToolRequests)
    [call] = paused.output.calls
    assert (call.tool_name, call.tool_call_id) == ("get_location", "demo_0_0")

    resumed = await agent.run(
        message_history=paused.all_messages(),
        deferred_tool_results=DeferredToolResults(calls={call.tool_call_id: {"lat": 1, "lon": 2}}),
    )
    assert resumed.output == 'get_location returned {"lat":1,"lon":2}.'


# --- limits ---------------------------------------------------------------------------------------------------
async def test_a_tool_turn_needs_two_requests() -> None:
    agent = demo_agent(get_weather)
    with pytest.raises(UsageLimitExceeded):
        await agent.run('/tool get_weather {"city": "Oslo"}', usage_limits=UsageLimits(request_limit=1))
    result = await agent.run('/tool get_weather {"city": "Oslo"}', usage_limits=UsageLimits(request_limit=2))
    assert result.usage.requests == 2
    assert result.usage.tool_calls == 1


@pytest.mark.parametrize("prompt", ["/burst 5", "hello there", '/tool plan_trip {"city": "Oslo", "days": 2}',
                                    "/tool nope", "/fail"])
async def test_the_demo_stream_gives_the_events_functionmodel_gives(prompt: str) -> None:
    """``DemoModel`` streams without FunctionModel's per-item machinery: same events, same response."""
    from pydantic_ai.direct import model_request_stream
    from pydantic_ai.messages import ModelRequest, UserPromptPart
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.function import FunctionModel

    demo = build_demo_model()
    function = FunctionModel(demo.function, stream_function=demo.stream_function, model_name=demo.model_name)
    parameters = ModelRequestParameters(function_tools=[Tool(plan_trip).tool_def], allow_text_output=True)

    async def run(model: Any) -> tuple[list[Any], Any, str | None]:
        events: list[Any] = []
        try:
            async with model_request_stream(model, [ModelRequest(parts=[UserPromptPart(prompt)])],
                                            model_request_parameters=parameters) as response:
                async for event in response:
                    events.append(event)
        except DemoModelError as exc:
            return events, None, str(exc)
        return events, response.get(), None

    demo_events, demo_response, demo_error = await run(demo)
    events, response, error = await run(function)
    assert demo_events == events
    assert demo_error == error
    if response is not None:
        assert (demo_response.parts, demo_response.model_name) == (response.parts, response.model_name)
        assert demo_response.usage.output_tokens > 0


# --- what came of a call decided later (durable pause) ----------------------------------------------------
def _decided(content: Any) -> list[Any]:
    """A call parked in an earlier reply, whose result now reads ``content`` (staff decided it)."""
    return [
        ModelRequest(parts=[UserPromptPart("deploy_release version 1.0.0")]),
        ModelResponse(parts=[ToolCallPart("deploy_release", "{}", tool_call_id="demo_0_0")]),
        ModelRequest(parts=[ToolReturnPart("deploy_release", content, tool_call_id="demo_0_0")]),
        ModelResponse(parts=[TextPart("Asked staff to approve deploy_release.")]),
    ]


def _planned(messages: list[Any]) -> str:
    info = AgentInfo(function_tools=[], allow_text_output=True, output_tools=[], model_settings=None,
                     model_request_parameters=ModelRequestParameters(), instructions=None)
    return "".join(plan(messages, info, 0.0).words)


@pytest.mark.parametrize(("content", "said"), [
    ("Deployed 1.0.0 to production.", "Deployed 1.0.0 to production."),
    ({"status": "rejected", "executionId": "actpause_1", "action": "deploy_release", "reason": "Not on a Friday"},
     "Staff rejected deploy_release: Not on a Friday."),
    ({"status": "error", "executionId": "actpause_1", "error": "It is gone"}, "deploy_release failed: It is gone."),
    ({"refund_id": 3, "order_id": "A1"}, "deploy_release returned refund id 3, order id A1."),
])
def test_a_later_decision_is_said_in_words_in_the_message_and_after_a_note_naming_it(content: Any,
                                                                                     said: str) -> None:
    assert _planned([*_decided(content), ModelRequest(parts=[])]) == said
    later = [ModelRequest(parts=[UserPromptPart("hello")]), ModelResponse(parts=[TextPart("Hi.")])]
    note = "<system>[durable action] Staff decided the paused call demo_0_0 of deploy_release.</system>"
    assert _planned([*_decided(content), *later, ModelRequest(parts=[UserPromptPart(note)])]) == said
    # A note that names no call of the conversation is only acknowledged.
    other = "<system>Something else happened to demo_9_0.</system>"
    assert _planned([*_decided(content), ModelRequest(parts=[UserPromptPart(other)])]).startswith(
        "(demo model, offline) Noted: ")
