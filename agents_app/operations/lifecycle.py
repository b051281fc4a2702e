"""What a process does when it starts and when it stops, and whether it is draining.

A registry, so that every feature with process-wide resources (connection pools, MCP sessions,
metrics) registers its own start-up and shutdown work here instead of editing the ASGI entry point
or the Celery signals: ``on_startup(fn)`` and ``on_shutdown(fn)``, each ``fn`` a function without
arguments, sync or async. The server runs them from the ASGI lifespan (``operations.lifespan``), a
Celery worker from its ready and shutdown signals (``operations.tasks``); docs/operations.md#lifespan.

*Draining*: the process has been asked to stop taking work (``SIGUSR1``, or its shutdown began). Its
readiness probe fails from then on, so a load balancer stops sending it connections.
"""

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

logger = logging.getLogger("agents_app.operations")

Hook = Callable[[], Awaitable[Any] | Any]

_startup: list[Hook] = []
_shutdown: list[Hook] = []
_draining = False


def on_startup(hook: Hook) -> Hook:
    """Run ``hook`` when a process starts serving (in registration order); usable as a decorator."""
    if hook not in _startup:
        _startup.append(hook)
    return hook


def on_shutdown(hook: Hook) -> Hook:
    """Run ``hook`` when a process stops (in reverse registration order); usable as a decorator."""
    if hook not in _shutdown:
        _shutdown.append(hook)
    return hook


def draining() -> bool:
    """Whether this process has been asked to stop taking work."""
    return _draining


def start_draining() -> None:
    """From now on this process reports itself not ready (it goes on serving what it has)."""
    global _draining
    if not _draining:
        logger.info("Draining: this process no longer reports itself ready")
    _draining = True


async def run_startup() -> None:
    await _run(list(_startup), "start-up")


async def run_shutdown() -> None:
    await _run(list(reversed(_shutdown)), "shutdown")


async def _run(hooks: list[Hook], stage: str) -> None:
    """Each hook in turn; one that fails is logged and the others still run."""
    for hook in hooks:
        try:
            result = hook()
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s hook %s failed", stage, getattr(hook, "__qualname__", hook))
