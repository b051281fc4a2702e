"""What happens to a submit that arrives while another turn of the conversation is queued or running.

``ChatAgent.message_concurrency``, as the reference's: ``"queue"`` (default), ``"drop"``,
``"latest"``, ``"merge"`` or ``Debounce(ms=750)``; docs/architecture.md#message-concurrency says
what each does. Only ``submit-message`` chat requests are subject to it; regenerations, tool
answers, continuations and programmatic turns always queue. A submit *overlaps* when a turn of the
current clear generation is queued or running when it is accepted. Pure: the decision is made
here, and ``turns.admission`` makes it in the database, where every process sees the same queue.
"""

import math
from dataclasses import dataclass
from typing import Literal, TypeAlias

# Default trailing-edge wait of ``Debounce`` (milliseconds; the reference's MESSAGE_DEBOUNCE_MS).
DEFAULT_DEBOUNCE_MS = 750.0

Strategy: TypeAlias = Literal["queue", "latest", "merge", "drop", "debounce"]
STRATEGIES: tuple[str, ...] = ("queue", "latest", "merge", "drop")


@dataclass(frozen=True)
class Debounce:
    """``message_concurrency = Debounce(ms=...)``: run only the newest overlapping submit, ``ms`` after it.

    An ``ms`` that is not a finite number ≥ 0 means the default (750 ms), as in the reference.
    """

    ms: float = DEFAULT_DEBOUNCE_MS

    @property
    def wait_ms(self) -> float:
        valid = isinstance(self.ms, int | float) and not isinstance(self.ms, bool) and math.isfinite(self.ms)
        return float(self.ms) if valid and self.ms >= 0 else DEFAULT_DEBOUNCE_MS


MessageConcurrency: TypeAlias = Literal["queue", "latest", "merge", "drop"] | Debounce


@dataclass(frozen=True)
class Decision:
    """What to do with one submit (``decide``)."""

    action: Literal["execute", "drop"]
    # The strategy that applied; None when the submit did not overlap (or is not a submit).
    strategy: Strategy | None = None
    # Whether the submit takes a place in the "newest overlapping submit wins" order.
    supersedable: bool = False
    # How long its turn waits after the submit before running (debounce), in milliseconds.
    wait_ms: float | None = None


def is_valid(value: object) -> bool:
    """Whether ``value`` is a ``message_concurrency`` setting (the system check reports others)."""
    return isinstance(value, Debounce) or value in STRATEGIES


def decide(concurrency: MessageConcurrency, *, submit: bool, overlapping: bool) -> Decision:
    """The reference's ``SubmitConcurrencyController.decide`` for one chat request."""
    if not submit or not overlapping or concurrency == "queue":
        return Decision("execute", strategy="queue" if submit and overlapping else None)
    if concurrency == "drop":
        return Decision("drop", strategy="drop")
    if isinstance(concurrency, Debounce):
        return Decision("execute", strategy="debounce", supersedable=True, wait_ms=concurrency.wait_ms)
    if concurrency in ("latest", "merge"):
        return Decision("execute", strategy=concurrency, supersedable=True)
    raise ValueError(f"message_concurrency must be one of {STRATEGIES} or Debounce(ms), not {concurrency!r}")
