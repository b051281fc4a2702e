"""Turn and recovery metrics from the app's observability events (``agents_app.events``).

Subscribed once per process when the app is ready (``install``): the engine and the recovery
service already say when a turn starts and ends and when an incident opens and closes, so the
metrics follow those events rather than adding calls to the code that emits them.
"""

from collections.abc import Callable
from typing import Any

from .. import events
from ..recovery import service as recovery
from . import instruments

# What a cut turn's error says → the ``reason`` label (bounded: anything else is "other").
REASONS = {recovery.INTERRUPTED: "interrupted", recovery.STALLED: "stalled", recovery.OUT_OF_MEMORY: "out_of_memory"}
ENDED = {
    events.RECOVERY_COMPLETED: "completed",
    events.RECOVERY_SKIPPED: "skipped",
    events.RECOVERY_FAILED: "failed",
    events.RECOVERY_EXHAUSTED: "exhausted",
}

_unsubscribe: Callable[[], None] | None = None


def install() -> None:
    """Subscribe ``observe`` to the app's events (once per process)."""
    global _unsubscribe
    if _unsubscribe is None:
        _unsubscribe = events.subscribe(observe)


def observe(name: str, data: dict[str, Any]) -> None:
    if name == events.TURN_START:
        instruments.TURNS_STARTED.labels(data["agent"]).inc()
    elif name == events.TURN_FINISH:
        instruments.TURNS_FINISHED.labels(data["agent"], data["status"]).inc()
        instruments.TURN_DURATION.labels(data["agent"]).observe(data["durationMs"] / 1000)
    elif name == events.RECOVERY_DETECTED:
        instruments.RECOVERY_INCIDENTS.labels(REASONS.get(data.get("reason") or "", "other")).inc()
    elif name in ENDED:
        instruments.RECOVERY_ENDED.labels(ENDED[name]).inc()
