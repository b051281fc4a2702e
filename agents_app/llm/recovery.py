"""How a reply cut by a crash goes on, by the model's provider (docs/architecture.md#recovery-by-provider).

A recovery attempt that continues a partial reply asks the model to go on from it. Providers
differ in what they allow, so the strategy is chosen by the model (``strategy_for``), and an agent
may name one (``ChatAgent.recovery_strategy``):

* ``prefill``: the request ends with the partial assistant message and the model continues it
  (Ollama, and the offline demo model). Nothing is added.
* ``synthetic``: the partial stays in the history and an ephemeral user message, never stored,
  asks the model to continue it (Anthropic, whose recent models reject a request that ends with
  an assistant message; OpenAI Chat Completions and other OpenAI-compatible servers, which answer
  a trailing assistant message afresh).
* ``retrieve``: OpenAI's Responses API keeps each response on the server. The reply's response id
  is stored as its stream starts (message metadata ``providerResponseId``, kept with the stream's
  chunks), requests run in background mode so the response completes without its client, and the
  recovery fetches the completed response and streams what the partial had not shown: no tokens
  are generated again. A response that is gone, failed, or still running after
  ``RETRIEVE_PATIENCE`` seconds falls back to ``synthetic``. A reply left before its end while
  its process lives (a cancelled turn) cancels its background response.
"""

import asyncio
import dataclasses
import logging
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from enum import StrEnum
from typing import Any, Final, cast

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

logger = logging.getLogger("agents_app.turns")


class Strategy(StrEnum):
    """How a partial reply is continued (module docstring)."""

    PREFILL = "prefill"
    SYNTHETIC = "synthetic"
    RETRIEVE = "retrieve"


# The ephemeral user message of the ``synthetic`` strategy.
CONTINUE_PROMPT: Final = (
    "Your previous reply was interrupted. Continue it exactly where it stopped: do not repeat "
    "anything you already wrote and do not mention the interruption."
)
# Message metadata key of the Responses API response a reply streams (``retrieve``).
RESPONSE_ID_KEY: Final = "providerResponseId"
# How long a recovery waits for a background response still running before generating instead (s).
RETRIEVE_PATIENCE: Final = 30.0
_POLL_INTERVAL: Final = 0.25


def strategy_for(model: Model, override: str | None = None) -> Strategy:
    """The strategy for ``model``'s provider, unless the agent names one (``override``)."""
    if override:
        return Strategy(override)
    if isinstance(model, RetrievingModel):
        return Strategy.RETRIEVE
    if isinstance(model, FunctionModel):  # the demo model continues a cut reply itself
        return Strategy.PREFILL
    if _is_a(model, "pydantic_ai.models.openai", "OpenAIResponsesModel"):
        return Strategy.RETRIEVE
    if _is_a(model, "pydantic_ai.models.anthropic", "AnthropicModel"):
        return Strategy.SYNTHETIC
    if _is_a(model, "pydantic_ai.models.openai", "OpenAIChatModel"):
        return Strategy.PREFILL if model.system == "ollama" else Strategy.SYNTHETIC
    return Strategy.SYNTHETIC


def _is_a(model: Model, module: str, name: str) -> bool:
    """``isinstance(model, module.name)`` without importing ``module``: a model of a provider's class
    exists only once its module is loaded, and loading the Anthropic and OpenAI SDKs takes seconds
    (2.7 s measured, on the event loop of a process's first turn with any other model)."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(model, getattr(loaded, name))


def strategy_problem(value: object) -> str | None:
    """Why ``value`` is not a ``recovery_strategy`` an agent may name, or None when it is one.

    Asked by the system check E005: a misspelt strategy then fails ``manage.py check``, not the
    first recovery of a turn (``strategy_for`` would raise there).
    """
    if value is None or value in tuple(Strategy):
        return None
    return f"recovery_strategy must be None or one of {', '.join(Strategy)}, not {value!r}"


def go_on_request(strategy: Strategy) -> ModelRequest:
    """What follows the partial reply in a request that continues it: nothing but an empty request
    (pydantic-ai's way to ask for more), or the ``synthetic`` strategy's user message."""
    if strategy is Strategy.SYNTHETIC:
        return ModelRequest(parts=[UserPromptPart(CONTINUE_PROMPT)])
    return ModelRequest(parts=[])


def response_id_of(messages: list[dict[str, Any]]) -> str | None:
    """The Responses API response id a transcript's last reply recorded, if any."""
    if not messages or messages[-1].get("role") != "assistant":
        return None
    value = (messages[-1].get("metadata") or {}).get(RESPONSE_ID_KEY)
    return value if isinstance(value, str) and value else None


def response_id_chunk(response_id: str) -> dict[str, Any]:
    """The chunk that records the reply's response id with its stream (and so with its message)."""
    return {"type": "message-metadata", "messageMetadata": {RESPONSE_ID_KEY: response_id}}


class RetrievingModel(WrapperModel):
    """A Responses API model that records each response's id and, continuing a cut reply whose
    response is known, fetches it instead of generating again (the ``retrieve`` strategy)."""

    def __init__(self, wrapped: Model, *, on_response_id: Callable[[str], Awaitable[None]],
                 resume_id: str | None = None) -> None:
        super().__init__(wrapped)
        self._on_response_id = on_response_id
        self._resume_id = resume_id

    @asynccontextmanager
    async def request_stream(
        self, messages: list[ModelMessage], model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters, run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        resume_id, self._resume_id = self._resume_id, None  # once: later steps of the run generate
        rest = None
        if resume_id is not None and _goes_on(messages):
            rest = await self._remainder(resume_id, messages, model_settings, model_request_parameters)
            if rest is None:
                messages = [*messages[:-1], go_on_request(Strategy.SYNTHETIC)]
        if rest is not None:
            yield CompletedStreamedResponse(rest, model_request_parameters=model_request_parameters,
                                            replay_events=True)
            return
        # Background mode: the response completes on the server even if this process dies.
        settings = cast(ModelSettings, {**(model_settings or {}), "openai_background": True})
        async with self.wrapped.request_stream(messages, settings, model_request_parameters, run_context) as stream:
            _record_id(stream, self._on_response_id)
            try:
                yield stream
            finally:
                if stream.provider_response_id and stream.state == "suspended":
                    # Left before its end (a cancelled turn): a background response would otherwise
                    # go on generating, and costing, on the provider's side.
                    await asyncio.shield(self._cancel(stream.provider_response_id))

    async def _cancel(self, response_id: str) -> None:
        from openai import OpenAIError
        from pydantic_ai.models.openai import OpenAIResponsesModel

        assert isinstance(self.wrapped, OpenAIResponsesModel)
        try:
            await self.wrapped.client.responses.cancel(response_id)
        except OpenAIError as exc:
            logger.warning("response %s could not be cancelled (%s)", response_id, exc)

    async def _remainder(self, response_id: str, messages: list[ModelMessage], settings: ModelSettings | None,
                         parameters: ModelRequestParameters) -> ModelResponse | None:
        """What the completed response ``response_id`` says beyond the partial reply, or None."""
        from openai import OpenAIError
        from pydantic_ai.models.openai import OpenAIResponsesModel

        model = self.wrapped
        assert isinstance(model, OpenAIResponsesModel)
        partial = messages[-2]
        assert isinstance(partial, ModelResponse)
        try:
            response = await model.client.responses.retrieve(response_id)
            for _ in range(int(RETRIEVE_PATIENCE / _POLL_INTERVAL)):
                if response.status not in ("queued", "in_progress"):
                    break
                await asyncio.sleep(_POLL_INTERVAL)
                response = await model.client.responses.retrieve(response_id)
        except OpenAIError as exc:
            logger.warning("recovery: response %s could not be retrieved (%s); generating instead", response_id, exc)
            return None
        if response.status != "completed":
            logger.warning("recovery: response %s is %s; generating instead", response_id, response.status)
            return None
        # pydantic-ai's own reading of a Responses API response (the pinned version's).
        full = model._process_response(response, cast(Any, settings or {}), parameters)
        return _rest(full, partial)


def _goes_on(messages: list[ModelMessage]) -> bool:
    """The request continues a partial reply: it ends with the reply and an empty request."""
    return (len(messages) >= 2 and isinstance(messages[-2], ModelResponse)
            and isinstance(messages[-1], ModelRequest) and not messages[-1].parts)


def _rest(full: ModelResponse, partial: ModelResponse) -> ModelResponse | None:
    """``full`` without what ``partial`` already showed (its text, its reasoning); None when the
    partial is not a start of it (it called tools, or said something else) or nothing is left."""
    if any(isinstance(part, ToolCallPart) for part in partial.parts):
        return None
    sent = "".join(part.content for part in partial.parts if isinstance(part, TextPart))
    reasoned = any(isinstance(part, ThinkingPart) for part in partial.parts)
    parts = []
    for part in full.parts:
        if isinstance(part, ThinkingPart) and reasoned:
            continue
        if isinstance(part, TextPart) and sent:
            if not part.content.startswith(sent):
                return None
            part, sent = dataclasses.replace(part, content=part.content[len(sent):]), ""
            if not part.content:
                continue
        parts.append(part)
    if sent or not parts:
        return None
    return dataclasses.replace(full, parts=parts)


def _record_id(stream: StreamedResponse, record: Callable[[str], Awaitable[None]]) -> None:
    """Call ``record`` with the stream's response id as soon as it is known (its first event).

    The id is read while the stream is consumed (``response.created``), so the stream's event
    iterator is wrapped before its first use.
    """
    events = stream._get_event_iterator

    async def recording() -> Any:
        recorded = False
        async for event in events():
            if not recorded and stream.provider_response_id:
                recorded = True
                await record(stream.provider_response_id)
            yield event

    stream._get_event_iterator = recording  # type: ignore[method-assign]
