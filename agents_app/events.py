"""Observability events: the spec's event names, emitted to the log and to in-process subscribers.

Spec cloudflare-agents.md §5.13 lists the only action events the reference emits (the RFC's
longer list is not emitted, §5.15.5), so these constants are the whole vocabulary. Tests
subscribe and assert on names and payloads, never on log text. Payload keys are the spec's
(``inputHash``, ``ageMs``, ``executionId``…) so a dashboard reads the same fields as on Cloudflare.

A subscriber runs synchronously inside ``emit()``; one that raises is logged and skipped, because
observability must never change what the caller does (a ledger settle must not fail because a
metrics hook did).
"""

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "LEDGER_CONFLICT",
    "LEDGER_PENDING",
    "LEDGER_RECLAIMED",
    "LEDGER_REPLAYED",
    "LEDGER_SERIALIZE_FAILED",
    "LEDGER_SETTLED",
    "LEDGER_SWEPT",
    "PAUSE_APPROVED",
    "PAUSE_CREATED",
    "PAUSE_REJECTED",
    "PAUSE_SWEPT",
    "REPLY_ATTACHED",
    "Subscriber",
    "emit",
    "subscribe",
]

logger = logging.getLogger("agents_app.events")

# Action ledger (§5.9). Payload {action, key, inputHash} unless noted.
LEDGER_REPLAYED = "action:ledger:replayed"
LEDGER_PENDING = "action:ledger:pending"
LEDGER_CONFLICT = "action:ledger:conflict"
LEDGER_SETTLED = "action:ledger:settled"
# {action, key, inputHash, ageMs}
LEDGER_RECLAIMED = "action:ledger:reclaimed"
# {action, key}
LEDGER_SERIALIZE_FAILED = "action:ledger:serialize_failed"
# {settled, pending}
LEDGER_SWEPT = "action:ledger:swept"

# Durable-pause actions (§5.10).
# {action, executionId, toolCallId}
PAUSE_CREATED = "action:pause:created"
# {action, executionId}
PAUSE_APPROVED = "action:pause:approved"
# {action, executionId}
PAUSE_REJECTED = "action:pause:rejected"
# {swept}, only when something was swept
PAUSE_SWEPT = "action:pause:swept"

# Reply attachments (§5.12). {action?, attachmentType}
REPLY_ATTACHED = "action:reply-attached"

Subscriber = Callable[[str, dict[str, Any]], object]

_subscribers: list[Subscriber] = []
# emit() may run in several threads at once (sync_to_async workers, Celery threads).
_lock = threading.Lock()


def subscribe(callback: Subscriber) -> Callable[[], None]:
    """Call ``callback(name, data)`` on every event; returns a function that unsubscribes it.

    Unsubscribing twice is harmless, so a test fixture can always call it in its teardown.
    """
    with _lock:
        _subscribers.append(callback)

    def unsubscribe() -> None:
        with _lock:
            if callback in _subscribers:
                _subscribers.remove(callback)

    return unsubscribe


def emit(name: str, **data: Any) -> None:
    """Log event ``name`` at INFO on ``agents_app.events`` and hand it to every subscriber.

    Subscribers get their own copy of ``data``; an exception in one is logged, never raised.
    """
    logger.info("%s %s", name, data, extra={"event": name, "event_data": data})
    with _lock:
        subscribers = list(_subscribers)
    for callback in subscribers:
        try:
            callback(name, dict(data))
        except Exception:  # a broken observer must not break the action it observes
            logger.exception("event subscriber %r failed on %s", callback, name)
