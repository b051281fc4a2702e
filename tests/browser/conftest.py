"""Fixtures for browser tests: one live stack (Redis + an ASGI server + a Celery worker) per session, one
Chromium per module.

Sync Playwright runs an event loop on the main thread while it is started; keeping it to a
module lets the asyncio tests of other modules run in the same pytest process.

Every test gets a fresh browser context (its own cookies) and a conversation name of its own, so
tests share the server but never a transcript. The worker runs the turns queued outside a socket
(the continuation after a staff approval, messages sent over the REST API); ``approver_context``
is a staff approver's browser, ``other_user_context`` a second user's, ``superuser_context`` a
superuser's.
"""

import itertools
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, WebSocket, sync_playwright

from tests.browser.pages import APPROVER, OTHER_USER, PASSWORD, SUPERUSER, USERNAME, Live, create_approver, login
from tests.support.live import LiveStack, RedisServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Default time for an expectation in a page (ms).
TIMEOUT_MS = 10_000


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("browser-stack")
    redis = RedisServer(workdir)
    stack: LiveStack | None = None
    try:
        stack = LiveStack(workdir, redis.url)
        stack.create_user(USERNAME, PASSWORD)
        stack.create_user(OTHER_USER, PASSWORD)
        stack.create_user(SUPERUSER, PASSWORD, staff=True)
        create_approver(stack)
        stack.start_celery_worker()
        yield Live(stack, stack.start_server())
    finally:
        if stack is not None:
            stack.stop()
        redis.stop()


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield chromium
    chromium.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


_CALL_FAILED = pytest.StashKey[bool]()
# Frames shown when a test fails (the newest ones).
FRAME_LOG_TAIL = 80


def _record_frames(page: Page, log: list[str], tab: str) -> None:
    """Observe (not intercept) the page's WebSockets: every frame, for failure reports."""

    def on_socket(ws: WebSocket) -> None:
        log.append(f"{tab} open {ws.url}")
        ws.on("framesent", lambda payload: log.append(f"{tab} > {str(payload)[:400]}"))
        ws.on("framereceived", lambda payload: log.append(f"{tab} < {str(payload)[:400]}"))
        ws.on("close", lambda _: log.append(f"{tab} closed"))

    page.on("websocket", on_socket)


@pytest.fixture(scope="module")
def cookies_of(browser: Browser, live: Live) -> Callable[[str], Any]:
    """The cookies of a user, logged in once per module through the real login form."""
    states: dict[str, Any] = {}

    def state(username: str) -> Any:
        if username not in states:
            ctx = browser.new_context()
            login(ctx.new_page(), live, username)
            states[username] = ctx.storage_state()
            ctx.close()
        return states[username]

    return state


@pytest.fixture
def context(browser: Browser, cookies_of: Callable[[str], Any],
            request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    """A browser context of the logged-in user (``clear_cookies()`` makes it anonymous)."""
    yield from _context(browser, cookies_of(USERNAME), request)


@pytest.fixture
def approver_context(browser: Browser, cookies_of: Callable[[str], Any],
                     request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    """A browser context of the staff approver (another browser, as far as the chat user knows)."""
    yield from _context(browser, cookies_of(APPROVER), request)


@pytest.fixture
def other_user_context(browser: Browser, cookies_of: Callable[[str], Any],
                       request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    """A browser context of the second user (``bob``): their own namespace."""
    yield from _context(browser, cookies_of(OTHER_USER), request)


@pytest.fixture
def superuser_context(browser: Browser, cookies_of: Callable[[str], Any],
                      request: pytest.FixtureRequest) -> Iterator[BrowserContext]:
    """A browser context of a superuser (``root``), at a 1280 px wide window: the admin's pages."""
    yield from _context(browser, cookies_of(SUPERUSER), request, width=1280)


def _context(browser: Browser, state: Any, request: pytest.FixtureRequest,
             width: int = 1100) -> Iterator[BrowserContext]:
    """A context with these cookies that fails the test on an uncaught page error and, when the test
    failed, prints its WebSocket frames."""
    ctx = browser.new_context(viewport={"width": width, "height": 800}, storage_state=state)
    ctx.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    frame_log: list[str] = []
    ctx.on("weberror", lambda error: errors.append(str(error.error)))
    tabs = itertools.count(1)
    ctx.on("page", lambda p: _record_frames(p, frame_log, f"tab{next(tabs)}"))
    yield ctx
    ctx.close()
    if request.node.stash.get(_CALL_FAILED, False):
        print(f"\n--- WebSocket frames (last {FRAME_LOG_TAIL}) ---")
        print("\n".join(frame_log[-FRAME_LOG_TAIL:]))
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def page(context: BrowserContext) -> Page:
    """A page of the logged-in user."""
    return context.new_page()


@pytest.fixture
def room() -> str:
    """A conversation name of this test's own."""
    return f"t-{uuid.uuid4().hex[:10]}"
