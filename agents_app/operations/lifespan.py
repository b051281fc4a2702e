"""The ASGI lifespan protocol: a server process's start-up and shutdown (docs/operations.md#lifespan).

uvicorn sends ``lifespan.startup`` before it accepts a connection and ``lifespan.shutdown`` after
``SIGTERM``, once it has stopped listening and closed its connections (WebSocket clients get close
code 1012 and reconnect to another process). Start-up warms the process (``server.warm``), runs the
registered hooks (``lifecycle``) and makes ``SIGUSR1`` start draining. Shutdown drains, hands the
turns still running here to recovery, runs the registered hooks and closes the pools. Daphne does
not speak this protocol: its processes stop as a crash does, and recovery carries their turns on.
"""

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from . import lifecycle, server

logger = logging.getLogger("agents_app.operations")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def application(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    """The ``lifespan`` scope's application (``thinkproject.asgi``)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await startup()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await shutdown()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def startup() -> None:
    # A process that cannot warm (the database is down, say) still starts: its readiness probe
    # says what is wrong, and the first turn pays for what was not warmed.
    try:
        await server.warm()
    except Exception:
        logger.exception("Warming the process failed; it starts cold")
    await lifecycle.run_startup()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, lifecycle.start_draining)


async def shutdown() -> None:
    lifecycle.start_draining()
    try:
        await server.hand_off()
    except Exception:  # what was not handed off is recovered as after a crash
        logger.exception("Handing off the running turns failed")
    await lifecycle.run_shutdown()
    await server.close()
