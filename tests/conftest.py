"""Shared fixtures: users, a logged-in WebSocket communicator, the events a test emits, frame helpers."""

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from pydantic_ai import models

from tests.support.events import Events
from thinkproject.asgi import application

# No test may reach a real model provider.
models.ALLOW_MODEL_REQUESTS = False

ORIGIN = (b"origin", b"http://localhost")

def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "emitted(prefixes=(...)): the emitted fixture keeps only events whose names start with one of these")


@pytest.fixture
def make_user(db: None) -> Callable[..., Any]:
    def make(username: str = "alice", **extra: Any) -> Any:
        return get_user_model().objects.create_user(username=username, password="pw", **extra)

    return make


@pytest.fixture
def user(make_user: Callable[..., Any]) -> Any:
    return make_user("alice")


@pytest.fixture
def emitted(request: pytest.FixtureRequest) -> Iterator[Events]:
    """The events emitted during the test, as (name, data): all, or those ``mark.emitted(prefixes=...)`` names."""
    from agents_app import events

    marker = request.node.get_closest_marker("emitted")
    prefixes = tuple(marker.kwargs["prefixes"]) if marker else ("",)
    seen: Events = []
    unsubscribe = events.subscribe(lambda name, data: name.startswith(prefixes) and seen.append((name, data)))
    yield seen
    unsubscribe()


async def connect(
    path: str, user: Any = None, *, origin: bool = True
) -> tuple[WebsocketCommunicator, bool, int | None]:
    """Open a WebSocket to ``path`` as ``user`` (session auth through a real session cookie)."""
    headers = [ORIGIN] if origin else []
    if user is not None:
        from django.conf import settings

        from tests.support.sessions import session_key

        key = await database_sync_to_async(session_key)(user)
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={key}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect()
    return communicator, connected, code


@pytest.fixture
async def ws(user: Any) -> AsyncIterator[Callable[..., Any]]:
    """Factory of connected communicators for ``user``; all are closed at the end of the test.

    The addressed conversation is made first where the user may make it, as a first message
    would (connecting alone stores nothing; ``connect`` opens a socket without making it).
    """
    opened: list[WebsocketCommunicator] = []

    async def open_ws(path: str = "/agents/demo-agent/default", as_user: Any = None) -> WebsocketCommunicator:
        await database_sync_to_async(_make_conversation)(path, as_user or user)
        communicator, connected, _ = await connect(path, as_user or user)
        assert connected
        opened.append(communicator)
        return communicator

    yield open_ws
    for communicator in opened:
        await communicator.disconnect()
    await engine_settled()


def _make_conversation(path: str, user: Any) -> None:
    """Store the conversation ``path`` names for ``user`` if it is theirs to make (else nothing)."""
    from urllib.parse import parse_qs, unquote, urlsplit

    from agents_app import registry
    from agents_app.errors import AgentAccessError

    url = urlsplit(path)
    parts = url.path.strip("/").split("/")
    if len(parts) < 3 or parts[0] != "agents":
        return
    owner = parse_qs(url.query, keep_blank_values=True).get(registry.OWNER_PARAMETER, [None])[-1]
    try:
        sub = registry.parse_sub_path(unquote("/" + "/".join(parts[3:])))
        registry.open_instance(unquote(parts[1]), unquote(parts[2]), user, owner, sub)
    except AgentAccessError:
        pass  # the socket itself answers with the error


async def engine_settled(timeout: float = 10) -> None:
    """Wait for the turns this test started in the background to finish their work.

    A turn's terminal frame comes before its last database writes (``on_chat_response``, the
    queue's idle event): the test database must not be flushed under them.
    """
    from agents_app.turns import engine

    pending = [task for task in engine._background if not task.done()]
    if pending:
        await asyncio.wait(pending, timeout=timeout)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the test item, so fixtures can tell whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
