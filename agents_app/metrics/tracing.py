"""OpenTelemetry traces of turns and model calls, through pydantic-ai's own instrumentation.

Off by default; ``AGENT_OTEL_TRACING = True`` (read once, when the app is ready) makes every
pydantic-ai agent run and model request, the direct first step included, record spans on the
global tracer provider. Which exporter receives them is the deployment's choice: configure
the OpenTelemetry SDK (docs/operations.md#tracing). Without an SDK the spans cost next to nothing.
"""

from pydantic_ai import Agent

from .. import conf


def install() -> None:
    if conf.get("AGENT_OTEL_TRACING"):
        Agent.instrument_all(True)
