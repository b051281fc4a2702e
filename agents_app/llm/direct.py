"""A turn's first model request made with pydantic-ai's direct API rather than inside an agent run.

Most turns are one request that streams text; the direct API (``model_request_stream``) streams
the same events without an agent run's per-event overhead (docs/decisions.md#direct-first-request).
When the model answers with tool calls, the reply goes on as an agent run over the history plus
this response (``FirstStep.history``, ``FirstStep.usage``), and the events of both parts go
through one encoder, so the client sees one stream. ``parameters`` returns None where the agent
could send something else (tools prepared per step, or revealed by a search): those turns run
wholly as agent runs. A test compares what a model receives both ways.
"""

import dataclasses
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from pydantic_ai import Tool
from pydantic_ai.direct import model_request_stream
from pydantic_ai.messages import (
    AgentInstructionSource,
    InstructionId,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponseStreamEvent,
    ToolCallPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets.abstract import AGENT_TOOLSET_ID
from pydantic_ai.usage import RunUsage


def parameters(tools: Sequence[Tool[object]], external: Sequence[ToolDefinition], instructions: str
               ) -> ModelRequestParameters | None:
    """The request parameters an agent with these tools and instructions sends (text output allowed,
    as ``output_type=[str, DeferredToolRequests]`` does); None when only an agent run can tell."""
    if any(tool.prepare is not None or tool.defer_loading for tool in tools):
        return None
    # Marked as the agent marks its own tools and instructions (telemetry, providers' caching).
    return ModelRequestParameters(
        function_tools=[dataclasses.replace(tool.tool_def, toolset_id=AGENT_TOOLSET_ID) for tool in tools]
        + list(external),
        allow_text_output=True,
        instruction_parts=([InstructionPart(content=instructions, id=InstructionId(AgentInstructionSource()))]
                           if instructions else None),
    )


@dataclass
class FirstStep:
    """One model request over ``messages``; ``response`` is set once its events are consumed."""

    model: Model
    messages: list[ModelMessage]
    parameters: ModelRequestParameters
    response: ModelResponse | None = None

    @staticmethod
    def can_start(messages: Sequence[ModelMessage]) -> bool:
        """The history ends with a request that has parts (a new prompt, not a resumed reply)."""
        return bool(messages) and isinstance(messages[-1], ModelRequest) and bool(messages[-1].parts)

    async def events(self) -> AsyncIterator[ModelResponseStreamEvent]:
        instructions = self.parameters.instruction_parts
        request = self.messages[-1]
        assert isinstance(request, ModelRequest)
        if instructions:
            # Recorded on the request as an agent run does (a new object: the history may be shared).
            self.messages = [*self.messages[:-1], dataclasses.replace(
                request, instructions=InstructionPart.join(instructions))]
        async with model_request_stream(self.model, self.messages, model_request_parameters=self.parameters) as stream:
            async for event in stream:
                yield event
        self.response = stream.get()

    @property
    def calls_tools(self) -> bool:
        assert self.response is not None
        return any(isinstance(part, ToolCallPart) for part in self.response.parts)

    @property
    def history(self) -> list[ModelMessage]:
        """The history an agent run goes on from: the request's messages and the response."""
        assert self.response is not None
        return [*self.messages, self.response]

    @property
    def usage(self) -> RunUsage:
        """The run's usage so far: one request, counted against the turn's step limit."""
        assert self.response is not None
        usage = RunUsage(requests=1)
        usage.incr(self.response.usage)
        return usage
