"""What a rolling restart costs live replies: the longest wait between two new words.

    .venv/bin/python -m bench.deploy [--chats 50] [--words 300]

Redis, SQLite, a Celery worker (one thread per chat) and two uvicorn servers; ``--chats`` chats
stream ``/slow`` replies (20 ms a word), spread over both servers. Once each has shown 10 words,
one server gets ``SIGTERM`` and a new one starts; the clients of the stopped one reconnect to a
server that is up and resume. Three rounds: the default grace period (the stopped server's turns
end there, followed through Redis), none (``AGENT_SHUTDOWN_GRACE_SECONDS=0``: they are handed to
recovery and the worker continues them), and the latter with the worker restarted while it
streams the continuations. Every reply is checked (no word lost
or doubled, the stored reply whole); printed: the longest wait between two new words per chat
(median, p95, max), for the chats that were on the restarted server and for the others.
"""

import argparse
import asyncio
import signal
import tempfile
from pathlib import Path

from bench._stack import machine_load, median, p95, report
from tests.support.deploy import Chat, Pool, expected_text, live_chat, stored_reply
from tests.support.live import LiveStack, RedisServer
from tests.support.load import make_sessions


async def _round(stack: LiveStack, chats: int, words: int, restart_worker: bool, name: str) -> list[list[object]]:
    """One restart under ``chats`` live replies; rows of the longest waits (``name`` labels them)."""
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
    while not all(len(chat.seen) >= 10 or chat.error for chat in items):
        await asyncio.sleep(0.05)

    def restart() -> None:
        pool.ws_bases.remove(old.ws)
        old.proc.send_signal(signal.SIGTERM)
        if restart_worker:
            old.proc.wait(30)
            worker.send_signal(signal.SIGTERM)
            stack.start_celery_worker("w2", concurrency=chats)
        else:
            pool.ws_bases.append(stack.start_server().ws)

    await asyncio.to_thread(restart)
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
    for label, group in (
        ("moved", [c for c in items if c.reconnects]),
        ("stayed", [c for c in items if not c.reconnects]),
    ):
        gaps = [chat.longest_gap for chat in group]
        if gaps:
            rows.append([name, label, len(group), f"{median(gaps):.2f}", f"{p95(gaps):.2f}", f"{max(gaps):.2f}"])
    stack.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=50)
    parser.add_argument("--words", type=int, default=300)
    args = parser.parse_args()
    print(f"load before: {machine_load()}")
    rows = []
    # The server restarted with the default grace period (its turns end there), with none (they
    # are handed to recovery at once), and the worker restarted while it runs those continuations.
    rounds = (("server, grace 10 s", "10", False), ("server, grace 0", "0", False), ("worker", "0", True))
    for name, grace, restart_worker in rounds:
        workdir = Path(tempfile.mkdtemp(prefix="bench-deploy-"))
        redis = RedisServer(workdir)
        try:
            stack = LiveStack(workdir, redis.url, extra_env={"AGENT_SHUTDOWN_GRACE_SECONDS": grace})
            try:
                rows += asyncio.run(_round(stack, args.chats, args.words, restart_worker, name))
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
