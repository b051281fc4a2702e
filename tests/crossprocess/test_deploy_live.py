"""Rolling restarts under live replies lose nothing (docs/operations.md#deploys).

Two uvicorn servers and 50 chats streaming ``/slow`` replies; one server gets ``SIGTERM`` and a new
one starts, as a deploy does: its lifespan shutdown lets the running turns end there (their clients,
reconnected to a server still up, follow them), or with no grace period hands them to recovery and
a Celery worker continues them; every client sees its reply to the end with no word lost or
doubled. The same when the Celery worker running those continuations is restarted.
``bench/deploy.py`` measures the waits between words; this only checks the replies.
"""

import asyncio
import signal
import threading
from typing import Any

import pytest

from tests.support.deploy import Chat, Pool, expected_text, live_chat, stored_reply
from tests.support.live import LiveStack, Server
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
