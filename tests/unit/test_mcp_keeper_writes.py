"""A keeper cancelled mid-write (a pool closing one still connecting) ends only once the write has:
the database thread goes on with a statement whatever happens to the task awaiting it, and a closed
pool must leave none running (a test database flushed under one reported "table is locked")."""

import asyncio
import threading

import pytest

from agents_app.mcp.connections import _to_the_end


@pytest.mark.django_db
async def test_a_cancelled_write_is_waited_for_before_the_cancellation_goes_on() -> None:
    started, release, done = threading.Event(), threading.Event(), []

    def write() -> str:
        started.set()
        release.wait(30)
        done.append("written")
        return "written"

    task = asyncio.ensure_future(_to_the_end(write))
    assert await asyncio.to_thread(started.wait, 30)
    task.cancel()
    # However long this waits, the task cannot end before the write (plain ``database_sync_to_async``
    # ended at once, its write still running).
    await asyncio.wait({task}, timeout=0.2)
    assert not task.done() and done == []
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == ["written"]


@pytest.mark.django_db
async def test_an_uncancelled_write_returns_its_result() -> None:
    assert await _to_the_end(lambda: 42) == 42
