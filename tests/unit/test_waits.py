"""``agents_app.waits`` where nothing can be heard (SQLite): a pause is the caller's poll interval,
bounded by ``at_most``, and no listener is started. Woken pauses on PostgreSQL:
``tests/crossprocess/test_waits_postgres.py``."""

import time

from agents_app import waits


def test_a_pause_on_sqlite_is_the_poll_interval_and_starts_no_listener() -> None:
    with waits.watching([1, 2]) as watch:
        started = time.monotonic()
        watch.pause(0.05)
        assert time.monotonic() - started >= 0.05
        watch.pause(3600, at_most=0)  # bounded by the caller's deadline: returns at once
    assert waits._the_listener is None


async def test_an_async_pause_is_bounded_the_same_way() -> None:
    with waits.watching([1]) as watch:
        await watch.apause(3600, at_most=0)
        started = time.monotonic()
        await watch.apause(0.05)
        assert time.monotonic() - started >= 0.05

