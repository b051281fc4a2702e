"""Limits that keep one client from slowing the others: frame rate, messages per request, turns per user.

Pure: the token bucket takes an injectable clock. The consumer gives each connection a bucket
(``AGENT_FRAME_RATE``); ``turns.admission`` counts a user's queued and running turns in the
database (``AGENT_MAX_ACTIVE_TURNS_PER_USER``), so that limit holds across processes; the parser's
caller checks ``AGENT_MAX_MESSAGES_PER_REQUEST``. A refusal is a ``ProtocolError`` with its own
code, so the client gets an error frame and the socket stays open.
"""

import time
from collections.abc import Callable
from typing import Final

RATE_LIMITED_MESSAGE: Final = "Too many frames: slow down (this frame was dropped)"


class TokenBucket:
    """``burst`` frames at once, refilled at ``per_second``; ``take()`` is False when none is left."""

    def __init__(self, *, per_second: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.updated = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.per_second)
        self.updated = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True
