"""The ``reason`` label of ``agents_recovery_incidents_total``: each reason the recovery service
writes on a cut turn has its own label, so "other" counts only what nobody foresaw."""

import pytest
from prometheus_client import REGISTRY

from agents_app import events
from agents_app.recovery import service as recovery


@pytest.mark.parametrize(("error", "label"), [
    (recovery.INTERRUPTED, "interrupted"),
    (recovery.STALLED, "stalled"),
    (recovery.OUT_OF_MEMORY, "out_of_memory"),
    ("something nobody foresaw", "other"),
])
def test_a_detected_incident_is_counted_under_its_reason(error: str, label: str) -> None:
    def count() -> float:
        return REGISTRY.get_sample_value("agents_recovery_incidents_total", {"reason": label}) or 0.0

    before = count()
    events.emit(events.RECOVERY_DETECTED, agent="demo-agent", name="room", requestId="r1", reason=error)
    assert count() == before + 1
