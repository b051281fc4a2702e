"""Rolling restarts under live replies lose nothing (docs/operations.md#deploys).

Two uvicorn servers and 50 chats streaming ``/slow`` replies; one server gets ``SIGTERM`` and a new
one starts, as a deploy does: its lifespan shutdown lets the running turns end there (their clients,
reconnected to a server still up, follow them), or with no grace period hands them to recovery and
a Celery worker continues them; every client sees its reply to the end with no word lost or
doubled. The same when the Celery worker running those continuations is restarted. A chat is
over when its reply is stored, not at its last word (``tests.support.deploy``): the stored
transcript is read then, and must be the reply the client saw.
``bench/deploy.py`` measures the waits between words; this only checks the replies.
"""

import asyncio
import contextlib
import fcntl
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.deploy import Chat, Pool, expected_text, live_chat, stored_reply
from tests.support.live import LiveStack, RedisServer, Server, database_url
from tests.support.load import make_sessions

pytestmark = pytest.mark.crossprocess

CHATS = 50
WORDS = 150


def _chats(prefix: str) -> list[Chat]:
    return [Chat(f"/agents/demo-agent/{prefix}-{i}", WORDS) for i in range(CHATS)]


async def _run(pool: Pool, chats: list[Chat], cookies: list[str], reader: Server, restart: Any) -> list[Chat]:
    """Every chat streaming; ``restart()`` (in a thread) once each has shown 10 words."""

    def get_messages(path: str, cookie: str) -> Any:
        return reader.get_json(f"{path}/get-messages", cookie)

    tasks = [
        asyncio.ensure_future(live_chat(pool, chat, cookie, lambda path, c=cookie: get_messages(path, c)))
        for chat, cookie in zip(chats, cookies, strict=True)
    ]
    while not all(len(chat.seen) >= 10 or chat.error for chat in chats):
        await asyncio.sleep(0.05)
    await asyncio.to_thread(restart)
    return list(await asyncio.gather(*tasks))


def _check(stack: LiveStack, reader: Server, chats: list[Chat], cookies: list[str]) -> None:
    failed = [
        f"{c.path}: {len(c.seen)} words, {c.doubled} doubled, {c.ahead} ahead, {c.reconnects} reconnects {c.error}"
        for c in chats
        if c.error or not c.complete or c.doubled
    ]
    assert failed == [], "\n".join(failed)
    for chat, cookie in zip(chats, cookies, strict=True):
        roles, text = stored_reply(reader.get_json(f"{chat.path}/get-messages", cookie))
        assert (roles, text) == (["user", "assistant"], expected_text(WORDS)), chat.path


def _server_logs_clean(stack: LiveStack) -> None:
    for log in stack.workdir.glob("server-*.log"):
        text = log.read_text()
        assert "ASGI 'lifespan' protocol appears unsupported" not in text, log.name
        assert "UvicornDeprecationWarning" not in text, log.name


@pytest.mark.parametrize("grace", ["10", "0"], ids=["turns-end-there", "handed-off"])
def test_server_restart_under_live_replies_loses_nothing(stack: LiveStack, grace: str) -> None:
    """With a grace period the old server's turns end there, followed from the other server; with
    none they are handed to recovery at once and a worker continues them."""
    stack.env["AGENT_SHUTDOWN_GRACE_SECONDS"] = grace
    cookies = make_sessions(stack, CHATS, prefix="deploy")
    stack.start_celery_worker(concurrency=CHATS)
    old, other = stack.start_server(), stack.start_server()
    pool = Pool([old.ws, other.ws])
    chats = _chats("server")
    started: list[Server] = []

    def restart() -> None:
        pool.ws_bases.remove(old.ws)  # the load balancer stops routing to it
        old.proc.send_signal(signal.SIGTERM)
        started.append(new := stack.start_server())
        pool.ws_bases.append(new.ws)
        old.proc.wait(30)  # uvicorn re-raises the signal it stopped on: -SIGTERM

    asyncio.run(_run(pool, chats, cookies, other, restart))
    _check(stack, other, chats, cookies)
    log = (stack.workdir / f"server-{old.port}.log").read_text()
    assert "Application shutdown complete." in log
    if grace == "0":
        assert "Handed off" in log  # its turns went to recovery at shutdown, not at the next sweep
    _server_logs_clean(stack)


def test_worker_restart_during_continuations_loses_nothing(stack: LiveStack) -> None:
    """The continuations of handed-off turns run on a worker; that worker is restarted meanwhile."""
    stack.env["AGENT_SHUTDOWN_GRACE_SECONDS"] = "0"
    cookies = make_sessions(stack, CHATS, prefix="worker")
    worker = stack.start_celery_worker("w1", concurrency=CHATS)
    old, other = stack.start_server(), stack.start_server()
    pool = Pool([old.ws])
    chats = _chats("worker")
    stopped = threading.Event()

    def restart() -> None:
        pool.ws_bases[:] = [other.ws]
        old.proc.send_signal(signal.SIGTERM)
        old.proc.wait(30)
        # The worker now streams every continuation: restart it (warm shutdown) and start another.
        worker.send_signal(signal.SIGTERM)
        stack.start_celery_worker("w2", concurrency=CHATS)
        assert worker.wait(120) == 0
        stopped.set()

    asyncio.run(_run(pool, chats, cookies, other, restart))
    assert stopped.is_set()
    _check(stack, other, chats, cookies)
    assert "Handed off" in (stack.workdir / f"server-{old.port}.log").read_text()
    _server_logs_clean(stack)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def stack_on(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Iterator[LiveStack]:
    """The ``stack`` fixture's servers on a database of each kind."""
    live = LiveStack(tmp_path, redis.url, database_url(request, request.param, tmp_path, "deploy"))
    yield live
    live.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        live.print_logs()


@contextlib.contextmanager
def turn_ends_held(stack: LiveStack, slug: str, name: str) -> Iterator[None]:
    """While the block runs, a turn of conversation ``slug/name`` cannot end: the transaction that
    stores its reply waits. On SQLite for the write lock every write transaction takes first
    (``thinkproject.sqlite``); on PostgreSQL for the instance row, which the end of a turn updates
    first (``AgentInstance.objects.touch``) and nothing else of a streaming turn locks."""
    url = stack.database_url
    if url.startswith("sqlite:///"):
        lock = os.open(f"{url.removeprefix('sqlite:///')}-writelock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
        finally:
            os.close(lock)  # releases the lock
        return
    with psycopg.connect(url) as conn:  # one transaction, rolled back at the end of the block
        row = conn.execute("SELECT id FROM agents_app_agentinstance WHERE slug = %s AND name = %s "
                           "FOR NO KEY UPDATE", (slug, name)).fetchone()
        assert row is not None, name
        yield
        conn.rollback()


async def _until(condition: Callable[[], bool], client: "asyncio.Future[Chat]") -> None:
    """Wait for ``condition`` of the chat ``client`` runs (bounded by the client's own timeout)."""
    while not condition():
        if client.done():
            raise AssertionError(f"the client ended first: {client.result()}")
        await asyncio.sleep(0.01)


def test_a_handed_off_reply_is_over_for_its_client_once_its_continuation_stored_it(stack_on: LiveStack) -> None:
    """The CI failure of ``test_worker_restart_during_continuations_loses_nothing``, made certain.

    A continuation streams its last words before the end of its turn stores the reply; until then
    the stored transcript holds the partial reply the hand-off stored. A client that stopped at its
    last word and read ``get-messages`` found that partial: the end of the turn is held here
    meanwhile. The client is over only once the reply is stored (``Chat.over``), and then the
    stored reply is the one it saw.
    """
    stack = stack_on
    stack.env["AGENT_SHUTDOWN_GRACE_SECONDS"] = "0"
    [cookie] = make_sessions(stack, 1, prefix="held")
    stack.start_celery_worker("w1", concurrency=2)
    old, other = stack.start_server(), stack.start_server()
    pool = Pool([old.ws])
    chat = Chat("/agents/demo-agent/held-0", WORDS)

    def get_messages(path: str) -> Any:
        return other.get_json(f"{path}/get-messages", cookie)

    async def run() -> tuple[list[str], str]:
        client = asyncio.ensure_future(live_chat(pool, chat, cookie, get_messages))
        await _until(lambda: len(chat.seen) >= 10, client)
        pool.ws_bases[:] = [other.ws]
        old.proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(old.proc.wait, 30)
        # A word of the continuation (not of request r1, the cut turn, replayed): the attempt has
        # stored the partial reply and streams the rest on the worker.
        await _until(lambda: chat.last_request not in (None, "r1"), client)
        with turn_ends_held(stack, "demo-agent", "held-0"):
            await _until(lambda: chat.complete, client)
            held = stored_reply(await asyncio.to_thread(get_messages, chat.path))
            assert not client.done(), "the client stopped before its reply was stored"
        await client
        return held

    roles, partial = asyncio.run(run())
    assert roles == ["user", "assistant"]
    assert expected_text(WORDS).startswith(partial) and partial != expected_text(WORDS), partial
    assert (chat.error, chat.over, chat.doubled) == ("", True, 0)
    assert stored_reply(get_messages(chat.path)) == (["user", "assistant"], expected_text(WORDS))
