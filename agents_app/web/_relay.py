"""A consumer's messages from the client and from the channel layer, handed to ``dispatch`` in turn.

Channels' ``await_many_dispatch`` waits on one task per source with ``asyncio.wait`` and makes a
new task for a source after each of its messages: about 12 µs of CPU a message here, against 4 for
this loop (bench/README.md, "Twenty-fourth round"), and every streamed batch of a reply is such a
message. Here each source has one task for the consumer's life, which hands its messages over
one at a time: it takes the next once ``dispatch`` has begun the one before, and that one waits
until the dispatch before it has finished. So at most two messages of a source are out of it (one
being dispatched, one waiting), and a slow client still leaves the channel layer's queue bounded
(its capacity) instead of this process's memory.

Messages are dispatched in the order they were taken, across sources: a frame the client sent
while a long dispatch ran (a resume request during a tool approval) goes before the channel
layer's messages that came after it (the continuation's first chunks), as the client sent them.
Channels' loop took a source's next message only after the last one's dispatch had finished,
so a batch published meanwhile went first, and the answer to the client's resume request came
after chunks of the stream it announced (docs/decisions.md#consumer-message-order). An exception
from a source or from ``dispatch`` ends the loop with it, and the tasks are cancelled on the way
out, whatever ends it.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

Source = Callable[[], Awaitable[Any]]


async def dispatch_in_turn(sources: Sequence[Source], dispatch: Callable[[Any], Awaitable[None]]) -> None:
    """Call ``dispatch`` with every message of ``sources`` until one of them, or ``dispatch``, raises."""
    loop = asyncio.get_running_loop()
    # (message, the future its source waits on), or the exception that ended a source
    ready: asyncio.Queue[tuple[Any, asyncio.Future[None]] | BaseException] = asyncio.Queue()

    async def take(source: Source) -> None:
        try:
            while True:
                message = await source()
                begun = loop.create_future()
                ready.put_nowait((message, begun))
                await begun
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - the loop below raises it
            ready.put_nowait(exc)

    takers = [asyncio.ensure_future(take(source)) for source in sources]
    try:
        while True:
            item = await ready.get()
            if isinstance(item, BaseException):
                raise item
            message, begun = item
            begun.set_result(None)  # its source may take its next message meanwhile
            await dispatch(message)
    finally:
        for taker in takers:
            taker.cancel()
        await asyncio.gather(*takers, return_exceptions=True)
