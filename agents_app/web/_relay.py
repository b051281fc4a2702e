"""A consumer's messages from the client and from the channel layer, handed to ``dispatch`` in turn.

Channels' ``await_many_dispatch`` waits on one task per source with ``asyncio.wait`` and makes a
new task for a source after each of its messages: about 12 µs of CPU a message here, against 4 for
this loop (bench/README.md, "Twenty-fourth round"), and every streamed batch of a reply is such a
message. Here each source has one task for the consumer's life, which hands its messages over
one at a time: it takes the next only once ``dispatch`` has finished with the one before, as
Channels' loop does, so a slow client still leaves the channel layer's queue bounded (its
capacity) instead of this process's memory. Messages are dispatched in the order their sources
gave them; an exception from a source or from ``dispatch`` ends the loop with it, and the tasks
are cancelled on the way out, whatever ends it.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

Source = Callable[[], Awaitable[Any]]


async def dispatch_in_turn(sources: Sequence[Source], dispatch: Callable[[Any], Awaitable[None]]) -> None:
    """Call ``dispatch`` with every message of ``sources`` until one of them, or ``dispatch``, raises."""
    loop = asyncio.get_running_loop()
    # (message, the future its source waits on, or the exception that ended a source)
    ready: asyncio.Queue[tuple[Any, asyncio.Future[None] | None, BaseException | None]] = asyncio.Queue()

    async def take(source: Source) -> None:
        try:
            while True:
                message = await source()
                dispatched = loop.create_future()
                ready.put_nowait((message, dispatched, None))
                await dispatched
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the loop below raises it
            ready.put_nowait((None, None, exc))

    takers = [asyncio.ensure_future(take(source)) for source in sources]
    try:
        while True:
            message, dispatched, failure = await ready.get()
            if failure is not None:
                raise failure
            try:
                await dispatch(message)
            finally:
                if dispatched is not None and not dispatched.done():
                    dispatched.set_result(None)
    finally:
        for taker in takers:
            taker.cancel()
        await asyncio.gather(*takers, return_exceptions=True)
