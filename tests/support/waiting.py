"""Waiting for a state the code under test reaches in its own time: one poller, sync and async."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], what: str, *, timeout: float, interval: float = 0.2, page: Any = None,
               on_timeout: Callable[[], object] | None = None) -> T:
    """Poll ``check`` every ``interval`` s until it returns something truthy, and return that; fail after ``timeout`` s.

    With a Playwright ``page``, the pauses are the page's own (it goes on delivering its events);
    ``on_timeout`` runs before the failure is raised (to print a server's logs, say).
    """
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            if on_timeout is not None:
                on_timeout()
            raise AssertionError(f"timed out waiting for {what} (within {timeout} s)")
        if page is None:
            time.sleep(interval)
        else:
            page.wait_for_timeout(interval * 1000)
    return value


async def eventually(check: Callable[[], Awaitable[T]], what: str, *, timeout: float, interval: float = 0.02) -> T:
    """``wait_until`` for an async ``check``, pausing on the event loop."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (within {timeout} s)")
        await asyncio.sleep(interval)
    return value
