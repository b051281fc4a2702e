"""The start-up and shutdown registry (``operations.lifecycle``): order, sync and async hooks, failures."""

import logging

import pytest

from agents_app.operations import lifecycle


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Empty hook lists and no draining, for this test only."""
    monkeypatch.setattr(lifecycle, "_startup", [])
    monkeypatch.setattr(lifecycle, "_shutdown", [])
    monkeypatch.setattr(lifecycle, "_draining", False)


@pytest.mark.usefixtures("registry")
async def test_hooks_run_in_order_sync_and_async_and_once_each() -> None:
    ran: list[str] = []

    def first() -> None:
        ran.append("first")

    async def second() -> None:
        ran.append("second")

    for hook in (first, second, first):  # registering twice runs once
        lifecycle.on_startup(hook)
        lifecycle.on_shutdown(hook)
    await lifecycle.run_startup()
    await lifecycle.run_shutdown()
    assert ran == ["first", "second", "second", "first"]  # shutdown in reverse order


@pytest.mark.usefixtures("registry")
async def test_a_failing_hook_is_logged_and_the_others_run(caplog: pytest.LogCaptureFixture) -> None:
    ran: list[str] = []

    @lifecycle.on_shutdown
    def closes() -> None:
        ran.append("closes")

    @lifecycle.on_shutdown
    async def fails() -> None:
        raise RuntimeError("session already gone")

    with caplog.at_level(logging.ERROR, logger="agents_app.operations"):
        await lifecycle.run_shutdown()
    assert ran == ["closes"]
    assert [r.getMessage() for r in caplog.records] == [f"shutdown hook {fails.__qualname__} failed"]


@pytest.mark.usefixtures("registry")
def test_draining_is_one_way() -> None:
    assert not lifecycle.draining()
    lifecycle.start_draining()
    lifecycle.start_draining()
    assert lifecycle.draining()
