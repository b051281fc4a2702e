"""``before_step``: Think's ``beforeStep`` (the AI SDK's ``prepareStep``) on pydantic-ai (docs/architecture.md#pruning).

A turn's model run makes one request per step (text, or tool calls and then another request with
their results). ``ChatAgent.before_step(ctx)`` is called before each and may answer with a
``StepConfig``: other messages for this request (``prune_messages`` from ``agents_app.pruning``
is made for this), another model, or fewer tools. It runs as a pydantic-ai capability's
``before_model_request``, the hook pydantic-ai's own history processors run in, so what it
returns applies to that request only: the stored transcript and the run's history are unchanged.
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestContext

from . import llm
from .actions.descriptor import call_maybe_async

if TYPE_CHECKING:
    from .actions.context import TurnState

__all__ = ["BeforeStep", "StepConfig", "StepContext"]


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """What ``before_step`` sees: Think's ``PrepareStepContext``, minus the JS-only fields."""

    # Zero-based number of the request about to be made in this model run (``stepNumber``).
    step_number: int
    # What this request will send, oldest first (``messages``); a copy, free to change.
    messages: list[ModelMessage]
    # The model this request goes to (``model``).
    model: Model
    # pydantic-ai's run context: ``run.deps`` is the turn, ``run.usage`` what the run spent so far.
    run: RunContext[Any]


@dataclass(frozen=True, kw_only=True)
class StepConfig:
    """``before_step``'s answer: Think's ``StepConfig``; every field None leaves that part alone."""

    # Send these messages instead (``messages``).
    messages: Sequence[ModelMessage] | None = None
    # Use this model for this request: a ``Model`` or an ``AGENT_MODEL``-style string (``model``).
    model: Model | str | None = None
    # Offer only these tools to the model for this request (``activeTools``).
    active_tools: Sequence[str] | None = None


@dataclass
class BeforeStep(AbstractCapability["TurnState[Any]"]):
    """The capability that asks the turn's agent ``before_step`` before every model request."""

    agent: Any

    async def before_model_request(self, ctx: RunContext["TurnState[Any]"],
                                   request_context: ModelRequestContext) -> ModelRequestContext:
        step = StepContext(step_number=max(ctx.run_step - 1, 0), messages=list(request_context.messages),
                           model=request_context.model, run=ctx)
        config = await call_maybe_async(self.agent.before_step, step)
        if config is None:
            return request_context
        if not isinstance(config, StepConfig):
            raise TypeError(f"before_step returns a StepConfig or None, not {config!r}")
        if config.messages is not None:
            request_context.messages = list(config.messages)
        if config.model is not None:
            request_context.model = llm.get_model(config.model) if isinstance(config.model, str) else config.model
        if config.active_tools is not None:
            parameters = request_context.model_request_parameters
            active = set(config.active_tools)
            request_context.model_request_parameters = dataclasses.replace(
                parameters, function_tools=[tool for tool in parameters.function_tools if tool.name in active],
            )
        return request_context
