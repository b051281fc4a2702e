"""``AbortSignal``: how a turn (and an action inside it) learns that it must stop.

The engine fires a turn's signal on cancel (stop button, ``cancel_chat``, clear); an action's
signal also fires on its timeout (``actions.pipeline``). Code that can stop early checks
``aborted``, awaits ``wait()``, or registers a callback.
"""

import asyncio
from collections.abc import Callable
from typing import Any


class AbortSignal:
    """Fires when the turn is cancelled (stop button, ``cancel_chat``, clear, timeout)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None
        self._callbacks: list[Callable[[], Any]] = []

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def abort(self, reason: str = "Aborted") -> None:
        if self._event.is_set():
            return
        self.reason = reason
        self._event.set()
        for callback in self._callbacks:
            callback()

    def add_callback(self, callback: Callable[[], Any]) -> None:
        """Call ``callback`` on abort (at once if already aborted)."""
        if self.aborted:
            callback()
        else:
            self._callbacks.append(callback)

    def remove_callback(self, callback: Callable[[], Any]) -> None:
        """Stop calling ``callback`` on abort (a no-op if it is not registered)."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    async def wait(self) -> None:
        await self._event.wait()

    def child(self) -> "AbortSignal":
        """A signal that fires when this one does, and may also fire on its own (a timeout)."""
        child = AbortSignal()
        self.add_callback(lambda: child.abort(self.reason or "Aborted"))
        return child
