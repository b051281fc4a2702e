"""What a rolling restart costs live replies: the longest wait between two new words.

    .venv/bin/python -m bench.deploy [--chats 50] [--words 300]

Redis, SQLite, a Celery worker (one thread per chat) and two uvicorn servers; ``--chats`` chats
stream ``/slow`` replies (20 ms a word), spread over both servers. Once each has shown 10 words,
one server gets ``SIGTERM`` and a new one starts; the clients of the stopped one reconnect to a
server that is up and resume. Four rounds: the default grace period (the stopped server's turns
end there, followed through Redis), none (``AGENT_SHUTDOWN_GRACE_SECONDS=0``: they are handed to
recovery and the worker continues them), and the latter with the worker restarted: once it streams
every continuation (``SIGTERM``, then a new one started; the waits counted are those after its
``SIGTERM``), and as the continuations arrive, in the order docs/operations.md#deploys gives (its
replacement is up first; the old one gets ``SIGTERM`` as soon as the stopped server has exited,
before it has started them all).
Every reply is checked (no word lost or doubled, the stored reply whole); printed: the longest wait
between two new words per chat (median, p95, max), for the chats that were on the restarted
server and for the others.
"""

import argparse
import asyncio
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench._stack import machine_load, median, p95, report
from tests.support.deploy import Chat, Pool, expected_text, live_chat, stored_reply
from tests.support.live import LiveStack, RedisServer
from tests.support.load import make_sessions


async def _round(stack: LiveStack, chats: int, words: int, worker_restart: str, name: str) -> list[list[object]]:
    """One restart under ``chats`` live replies; rows of the longest waits (``name`` labels them).

    ``worker_restart``: "" (a server restart only), "streaming" (then the worker, once it streams
    every continuation; the waits counted are those after its ``SIGTERM``) or "early" (a
    replacement worker started first, then the old one stopped as soon as the stopped server has
    exited, before it has started all the continuations)."""
    cookies = make_sessions(stack, chats, prefix="chat")
    worker = stack.start_celery_worker("w1", concurrency=chats)
    old, other = stack.start_server(), stack.start_server()
    pool = Pool([old.ws, other.ws])
    items = [Chat(f"/agents/demo-agent/chat-{i}", words) for i in range(chats)]
    tasks = [
        asyncio.ensure_future(
            live_chat(pool, chat, cookie, lambda path, c=cookie: other.get_json(f"{path}/get-messages", c))
        )
        for chat, cookie in zip(items, cookies, strict=True)
    ]
    await _until(lambda: all(len(chat.seen) >= 10 or chat.error for chat in items))
    if worker_restart == "early":
        await asyncio.to_thread(stack.start_celery_worker, "w2", chats)

    def restart_server() -> None:
        pool.ws_bases.remove(old.ws)
        old.proc.send_signal(signal.SIGTERM)
        if worker_restart:
            old.proc.wait(30)
        else:
            pool.ws_bases.append(stack.start_server().ws)

    def restart_worker() -> None:
        worker.send_signal(signal.SIGTERM)
        if worker_restart == "streaming":
            stack.start_celery_worker("w2", concurrency=chats)

    seen_at_restart = [len(chat.seen) for chat in items]
    await asyncio.to_thread(restart_server)
    counted_from = [0] * chats
    if worker_restart == "streaming":
        # Every reply goes on (the handed-off ones on the worker) well past where it was cut.
        await _until(lambda: all(len(chat.seen) >= seen + 20 or chat.error or chat.complete
                                 for chat, seen in zip(items, seen_at_restart, strict=True)))
        counted_from = [len(chat.gaps) for chat in items]
        if any(chat.complete for chat in items):
            raise AssertionError("a reply ended before the worker's restart: give --words more")
    if worker_restart:
        await asyncio.to_thread(restart_worker)
    await asyncio.gather(*tasks)
    for chat, cookie in zip(items, cookies, strict=True):
        if chat.error or not chat.complete or chat.doubled:
            raise AssertionError(f"{chat.path}: {chat}")
        if stored_reply(other.get_json(f"{chat.path}/get-messages", cookie)) != (
            ["user", "assistant"],
            expected_text(words),
        ):
            raise AssertionError(f"{chat.path}: the stored reply is wrong")
    rows = []
    # Each chat's longest wait in the window counted (from the worker's restart, or all of it).
    longest = [(chat, max(chat.gaps[start:], default=0.0)) for chat, start in zip(items, counted_from, strict=True)]
    for label, moved in (("moved", True), ("stayed", False)):
        gaps = [gap for chat, gap in longest if bool(chat.reconnects) == moved]
        if gaps:
            rows.append([name, label, len(gaps), f"{median(gaps):.2f}", f"{p95(gaps):.2f}", f"{max(gaps):.2f}"])
    stack.stop()
    return rows


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--words", type=int, default=300)
    args = parser.parse_args()
    print(f"load before: {machine_load()}")
    rows = []
    # The server restarted with the default grace period (its turns end there), with none (they
    # are handed to recovery at once), and then the worker restarted while it streams those
    # continuations, or replaced (its replacement up first) before it has started them all.
    rounds = (("server, grace 10 s", "10", ""), ("server, grace 0", "0", ""),
              ("worker, while it streams the continuations", "0", "streaming"),
              ("worker, replaced as the continuations arrive", "0", "early"))
    for name, grace, worker_restart in rounds:
        workdir = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
        redis = RedisServer(workdir)
        try:
            stack = LiveStack(workdir, redis.url, extra_env={"AGENT_SHUTDOWN_GRACE_SECONDS": grace})
            try:
                rows += asyncio.run(_round(stack, args.chats, args.words, worker_restart, name))
            finally:
                stack.stop()
        finally:
            redis.stop()
    report(
        f"Rolling restart, {args.chats} chats of /slow {args.words} 20: longest wait between two new words (s)",
        ["restart", "chats", "n", "median", "p95", "max"],
        rows,
    )
    print(f"load after: {machine_load()}")


if __name__ == "__main__":
    main()
