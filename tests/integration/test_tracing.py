"""``AGENT_OTEL_TRACING``: turns' model calls become OpenTelemetry spans through pydantic-ai's own
instrumentation, off by default (docs/operations.md#tracing). The spans are read back from the
SDK's in-memory exporter on the global tracer provider, where the instrumentation sends them."""

from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent

from agents_app.llm import demo
from agents_app.metrics import tracing
from tests.integration import test_providers
from tests.integration.test_providers import run_turn
from tests.support.frames import user_message

pytestmark = pytest.mark.django_db(transaction=True)

chat = test_providers.chat
EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the global provider can be set once per process
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    Agent.instrument_all(False)  # what tracing.install() switched on, for the tests after this one


async def test_with_tracing_on_a_turns_model_request_is_a_span(
    spans: InMemorySpanExporter, chat: WebsocketCommunicator
) -> None:
    with override_settings(AGENT_OTEL_TRACING=True):
        tracing.install()
    await run_turn(chat, "r1", [user_message("u1", "Hi")])

    [request] = [s for s in spans.get_finished_spans() if s.name == f"chat {demo.MODEL_NAME}"]
    attributes: Any = request.attributes
    assert attributes["gen_ai.request.model"] == demo.MODEL_NAME
    assert attributes["gen_ai.usage.input_tokens"] > 0


async def test_tracing_is_off_by_default(spans: InMemorySpanExporter, chat: WebsocketCommunicator) -> None:
    tracing.install()
    await run_turn(chat, "r1", [user_message("u1", "Hi")])

    assert spans.get_finished_spans() == ()
