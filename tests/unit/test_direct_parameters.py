"""``llm.direct.parameters``: the first request is made directly only where its parameters are known."""

from typing import Any

from pydantic_ai import Tool

from agents_app.llm import direct


def weather(city: str) -> str:
    """Current weather."""
    return city


async def only_sometimes(ctx: Any, tool_def: Any) -> Any:
    return tool_def


def test_plain_tools_are_offered_as_the_agent_offers_them() -> None:
    parameters = direct.parameters([Tool(weather)], [], "Be brief.")
    assert parameters is not None
    assert [(t.name, t.toolset_id) for t in parameters.function_tools] == [("weather", "<agent>")]
    assert parameters.allow_text_output
    assert [p.content for p in parameters.instruction_parts or []] == ["Be brief."]


def test_no_instructions_no_instruction_parts() -> None:
    parameters = direct.parameters([], [], "")
    assert parameters is not None and parameters.instruction_parts is None


def test_tools_prepared_per_step_or_hidden_need_an_agent_run() -> None:
    assert direct.parameters([Tool(weather, prepare=only_sometimes)], [], "") is None
    assert direct.parameters([Tool(weather, defer_loading=True)], [], "") is None
