"""A tool call runs only once the turn has handled (stored) its announcement (``CallAnnouncements``).

pydantic-ai's ``run_stream_events`` starts a tool as soon as its reader has received the call's
event; the turn stores ``tool-input-available`` after that. These runs use a real pydantic-ai
agent and the real ``ToolPolicy``; the reader takes its time over the call's event, as the
turn's flush does under load.
"""

import asyncio
from dataclasses import dataclass

from pydantic_ai import Agent
from pydantic_ai.messages import FunctionToolCallEvent, ToolCallEvent
from pydantic_ai.models.test import TestModel

from agents_app.actions.context import CallAnnouncements
from agents_app.tools import ToolPolicy


@dataclass
class Deps:
    announcements: CallAnnouncements | None


async def _run(deps: Deps) -> list[str]:
    log: list[str] = []
    agent = Agent(TestModel(call_tools=["work"]), deps_type=Deps, capabilities=[ToolPolicy()])

    @agent.tool_plain
    async def work() -> str:
        log.append("tool runs")
        return "done"

    async with agent.run_stream_events("go", deps=deps) as events:
        async for event in events:
            if isinstance(event, FunctionToolCallEvent):
                log.append("storing the call")
                # Several turns of the loop, as a flush that hops to a thread.
                for _ in range(20):
                    await asyncio.sleep(0)
                log.append("call stored")
            if isinstance(event, ToolCallEvent) and deps.announcements is not None:
                deps.announcements.handled(event.part.tool_call_id)
    return log


def test_a_tool_waits_until_its_call_is_handled() -> None:
    log = asyncio.run(_run(Deps(CallAnnouncements())))
    assert log == ["storing the call", "call stored", "tool runs"]


def test_without_the_gate_the_tool_overtakes_the_reader() -> None:
    """Why the gate exists: pydantic-ai alone runs the tool while the call is being stored."""
    log = asyncio.run(_run(Deps(None)))
    assert log.index("tool runs") < log.index("call stored")
