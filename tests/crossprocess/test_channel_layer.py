"""The project's channel layer on a real Redis: groups in memory, one PUBLISH across processes.

Each ``FanoutRedisChannelLayer`` instance has its own client prefix, subscription and pump, as a
process does; two of them in one event loop are two processes as far as Redis can tell. The live
suites (two Daphnes, Celery workers) run every chat feature over this layer as well. Redis going
away under two live servers is one warning and one line when it is back, in each server's log.
"""

import asyncio
import json
import re
import shutil
import subprocess
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from websockets.asyncio.client import ClientConnection

from tests.support.frames import RESP, chat_request, is_done, text_of, user_message
from tests.support.live import PYTHON, ROOT, LiveStack, RedisServer, Server, wait_for_port
from tests.support.wsclient import open_socket, recv_json, recv_until
from thinkproject.channel_layer import FanoutRedisChannelLayer

pytestmark = pytest.mark.crossprocess

PATIENCE = 30


@pytest.fixture
async def layers(redis: RedisServer) -> AsyncIterator[tuple[FanoutRedisChannelLayer, FanoutRedisChannelLayer]]:
    pair = (FanoutRedisChannelLayer(hosts=[{"address": redis.url}]),
            FanoutRedisChannelLayer(hosts=[{"address": redis.url}]))
    yield pair
    for layer in pair:
        await layer.flush()


async def receive(layer: FanoutRedisChannelLayer, channel: str) -> dict:
    return await asyncio.wait_for(layer.receive(channel), PATIENCE)


async def test_a_group_message_reaches_members_of_this_process_and_of_another_once(layers):
    a, b = layers
    a1, a2, b1 = await a.new_channel(), await a.new_channel(), await b.new_channel()
    for layer, channel in ((a, a1), (a, a2), (b, b1)):
        await layer.group_add("room", channel)
    for n in range(50):
        await a.group_send("room", {"type": "chat.frames", "n": n})
    for layer, channel in ((a, a1), (a, a2), (b, b1)):
        assert [(await receive(layer, channel))["n"] for _ in range(50)] == list(range(50))
    # Nothing doubled: the sender skips its own publications.
    await a.group_send("room", {"type": "chat.frames", "n": "last"})
    for layer, channel in ((a, a1), (a, a2), (b, b1)):
        assert (await receive(layer, channel))["n"] == "last"
        assert layer.receive_buffer.get(channel) is None or layer.receive_buffer[channel].empty()


async def test_group_messages_and_point_to_point_messages_arrive_on_one_channel(layers):
    """A consumer's channel gets its group's frames in memory and control messages from Redis."""
    a, b = layers
    channel = await a.new_channel()
    await a.group_add("room", channel)
    waiting = asyncio.ensure_future(a.receive(channel))
    await b.send(channel, {"type": "flushed", "seq": 7})  # from another process, through Redis
    assert (await asyncio.wait_for(waiting, PATIENCE))["seq"] == 7
    waiting = asyncio.ensure_future(a.receive(channel))
    await a.group_send("room", {"type": "chat.frames", "n": 1})  # this process, in memory
    assert (await asyncio.wait_for(waiting, PATIENCE))["n"] == 1


async def test_a_message_to_a_channel_of_the_same_process_does_not_go_through_redis(layers, redis):
    """A turn's control channel and the reader that asks it to flush, on one process: in memory."""
    a, _ = layers
    channel = await a.new_channel()
    client = Redis.from_url(redis.url)
    before = client.info("commandstats")
    await a.send(channel, {"type": "stream.flush", "token": "t", "seq": [1, 2]})
    assert await receive(a, channel) == {"type": "stream.flush", "token": "t", "seq": [1, 2]}
    sent = {name for name, stats in client.info("commandstats").items() if stats != before.get(name)}
    assert not sent & {"cmdstat_zadd", "cmdstat_zcount", "cmdstat_expire", "cmdstat_zremrangebyscore"}, sent
    assert a.receive_buffer.get(channel) is None


async def test_after_discard_a_channel_gets_nothing_and_the_process_unsubscribes(layers):
    a, b = layers
    a1, b1 = await a.new_channel(), await b.new_channel()
    await a.group_add("room", a1)
    await b.group_add("room", b1)
    await b.group_discard("room", b1)
    await b.group_discard("room", b1)  # twice: nothing happens
    assert "room" not in b.local_groups
    await a.group_send("room", {"type": "chat.frames", "n": 1})
    assert (await receive(a, a1))["n"] == 1
    # b's subscription is gone (a's is the only one left on the topic).
    connection = a.connection(0)
    counts = dict(await connection.pubsub_numsub(a.topic("room")))
    assert counts[a.topic("room").encode()] == 1
    assert b.receive_buffer.get(b1) is None


async def test_a_member_added_after_the_first_also_waits_for_the_subscription(layers):
    a, b = layers
    channels = [await b.new_channel() for _ in range(5)]
    await asyncio.gather(*(b.group_add("room", c) for c in channels))
    await a.group_send("room", {"type": "chat.frames", "n": 1})
    for channel in channels:
        assert (await receive(b, channel))["n"] == 1


async def test_a_process_that_joins_before_the_sender_watches_for_joins_gets_the_live_chunks(layers):
    """A count taken while the sender heard no join notice says nothing of later joins.

    The first reconnect of the hundred-drops resume test: the turn's process had one socket (its
    own subscription was the PUBLISH's only receiver) and did not listen to join notices yet (it
    does from its first live chunk on); the other process joined, and its notice went unheard.
    The turn then skipped the PUBLISH of every live chunk: the reader got them only from the
    stream buffer, at the stream's end.
    """
    a, b = layers
    a1, b1 = await a.new_channel(), await b.new_channel()
    await a.group_add("room", a1)
    await a.group_send("room", {"type": "chat.frames", "n": 0})  # a stream's start: its one receiver is a
    await b.group_add("room", b1)  # b's join notice: nobody listens to them yet
    await a.group_send_lossy("room", {"type": "chat.frames", "n": 1})  # a live chunk
    assert (await receive(b, b1))["n"] == 1
    assert [(await receive(a, a1))["n"] for _ in range(2)] == [0, 1]


async def test_shared_groups_travel_on_one_topic_and_their_joins_and_leaves_send_no_command(layers, redis):
    """Sockets on addresses with no row yet wait in groups that share one topic: once a process
    listens to it, their joins and leaves send Redis nothing (no SUBSCRIBE, no UNSUBSCRIBE, no join
    notice), and each group gets its own messages from another process, and only those."""
    a, b = layers
    client = AsyncRedis.from_url(redis.url)
    notices = client.pubsub()
    try:
        await notices.subscribe(b.joins_topic)
        assert (await notices.get_message(timeout=PATIENCE))["type"] == "subscribe"
        b1, b2, b3, b4 = [await b.new_channel() for _ in range(4)]
        await b.group_add_shared("agent.new.x", b1)  # the first: the process starts listening
        before = await client.info("commandstats")
        await b.group_add_shared("agent.new.y", b2)
        await b.group_add_shared("agent.new.z", b3)
        await b.group_discard("agent.new.z", b3)
        sent = {name for name, stats in (await client.info("commandstats")).items() if stats != before.get(name)}
        assert sent <= {"cmdstat_info"}, sent
        topics = await client.pubsub_channels()
        assert not [topic for topic in topics if b"agent.new" in topic], topics
        assert dict(await client.pubsub_numsub(b.shared_topic))[b.shared_topic.encode()] == 1
        await b.group_add("room", b4)  # the control: a join that is announced
        notice = await notices.get_message(ignore_subscribe_messages=True, timeout=PATIENCE)
        assert notice["data"].endswith(b"room")  # the first notice is the announced join's

        await a.group_send_shared("agent.new.x", {"type": "conversation.created", "pk": 7})
        await a.group_send_shared("agent.new.z", {"type": "conversation.created", "pk": 8})  # left
        await a.group_send_shared("agent.new.y", {"type": "conversation.created", "pk": 9})
        assert (await receive(b, b1))["pk"] == 7
        assert (await receive(b, b2))["pk"] == 9  # in order from one sender: 8 went to nobody
        assert b.receive_buffer.get(b3) is None and b.receive_buffer[b1].empty()
    finally:
        await notices.aclose()
        await client.aclose()


async def test_a_publication_of_another_os_process_is_delivered(layers, redis):
    _, b = layers
    channel = await b.new_channel()
    await b.group_add("room", channel)
    script = ("import asyncio, sys; from thinkproject.channel_layer import FanoutRedisChannelLayer as L; "
              "asyncio.run(L(hosts=[{'address': sys.argv[1]}]).group_send('room', {'type': 'chat.frames', 'n': 9}))")
    process = await asyncio.create_subprocess_exec(PYTHON, "-c", script, redis.url, cwd=ROOT,
                                                   stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(process.communicate(), PATIENCE)
    assert process.returncode == 0, stderr.decode()
    assert (await receive(b, channel))["n"] == 9


async def test_hundreds_of_groups_joined_at_once_share_one_subscription_connection(layers):
    """Sockets of hundreds of conversations connecting together (the 500-socket load test)."""
    a, b = layers
    channels = [await b.new_channel() for _ in range(300)]
    await asyncio.gather(*(b.group_add(f"room{i}", c) for i, c in enumerate(channels)))
    await asyncio.gather(*(a.group_send(f"room{i}", {"type": "chat.frames", "n": i}) for i in range(300)))
    assert [(await receive(b, c))["n"] for c in channels] == list(range(300))


async def test_publications_sent_at_once_are_pipelined_on_one_connection(layers, redis):
    """A process's publications sent together leave on the one connection its loop keeps for them,
    in batches (no pooled connection per command), and arrive in the order they were sent."""
    a, b = layers
    channels = [await b.new_channel() for _ in range(3)]
    for i, channel in enumerate(channels):
        await b.group_add(f"piped{i}", channel)
    await a.group_send("piped0", {"type": "chat.frames", "n": -1})  # opens the publications' connection
    assert (await receive(b, channels[0]))["n"] == -1
    client = AsyncRedis.from_url(redis.url)
    try:
        before = await client.info("stats")
        await asyncio.gather(*(a.group_send(f"piped{n % 3}", {"type": "chat.frames", "n": n}) for n in range(300)))
        after = await client.info("stats")
    finally:
        await client.aclose()
    assert after["total_connections_received"] == before["total_connections_received"]
    for i, channel in enumerate(channels):
        assert [(await receive(b, channel))["n"] for _ in range(100)] == list(range(i, 300, 3))


# The layer's two lines about an outage (thinkproject.channel_layer).
LOST = "Channel layer lost Redis"
BACK = re.compile(r"Channel layer has Redis back after [0-9.]+ s; (\d+) messages? to other processes dropped")
# Chunks the turn streams while Redis is down, before it is started again.
CHUNKS_WHILE_DOWN = 100


def start_again(redis: RedisServer, workdir: Path) -> None:
    """A new redis-server on the port of the stopped one (empty, as after a crash without persistence)."""
    exe = shutil.which("redis-server")
    assert exe is not None
    redis.proc = subprocess.Popen(
        [exe, "--port", str(redis.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    wait_for_port(redis.port, redis.proc)


async def _joined(server: Server, path: str, cookie: str) -> ClientConnection:
    sock = await open_socket(server.ws, path, cookie)
    await recv_until(sock, lambda f: f["type"] == "cf_agent_mcp_servers")
    return sock


def test_loops_in_threads_of_one_process_get_their_messages_also_after_the_pumps_loop_ends(redis):
    """A Celery worker's thread pool runs each task on an event loop of its own, all sharing the
    process's layer. Messages another process sends reach the channel of each loop, and keep
    reaching the loop still running once the loop that ran the pump has ended."""
    worker = FanoutRedisChannelLayer(hosts=[{"address": redis.url}])
    sender = FanoutRedisChannelLayer(hosts=[{"address": redis.url}])
    channels: dict[str, str] = {}
    ready = {name: threading.Event() for name in ("a", "b")}
    received: dict[str, list[int]] = {}

    def task(name: str, count: int) -> None:
        async def main() -> None:
            channel = channels[name] = await worker.new_channel()
            ready[name].set()
            received[name] = [(await receive(worker, channel))["n"] for _ in range(count)]

        asyncio.run(main())  # as a thread-pool task's loop ends: every task left on it is cancelled

    def send(name: str, n: int) -> None:
        asyncio.run(sender.send(channels[name], {"type": "control", "n": n}))

    a = threading.Thread(target=task, args=("a", 1))
    b = threading.Thread(target=task, args=("b", 2))
    a.start()
    b.start()
    assert ready["a"].wait(PATIENCE) and ready["b"].wait(PATIENCE)
    send("a", 0)
    send("b", 0)
    a.join(PATIENCE)
    assert not a.is_alive() and received["a"] == [0]
    send("b", 1)  # popped by whichever pump runs now: b's loop is the only one left
    b.join(PATIENCE)
    assert not b.is_alive() and received["b"] == [0, 1]
    asyncio.run(sender.flush())


def test_redis_down_mid_stream_is_one_warning_and_one_line_when_it_is_back(tmp_path: Path) -> None:
    """Redis stops while a turn streams to sockets on two servers, and starts again on its port.

    The turn runs on the first server, whose layer publishes its chunks for the second: while
    Redis is down each of those publications fails. Each server logs that it lost Redis once and
    that it has it back once, with the count of what it dropped (the first dropped chunks, the
    second nothing), and no traceback. The reply completes and is stored; the second server's
    socket gets every word too (the chunks it missed are sent again from the stream buffer).
    """
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    stack = LiveStack(tmp_path, redis.url)
    words = "".join(f"w{i} " for i in range(400))
    path = "/agents/demo-agent/redis-down"
    try:
        stack.create_user("alice")
        runner, watcher = stack.start_server(), stack.start_server()
        cookie = runner.login("alice")

        async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
            here, there = await _joined(runner, path, cookie), await _joined(watcher, path, cookie)
            await here.send(json.dumps(chat_request("r1", [user_message("u1", "/slow 400 20")])))
            seen = await recv_until(here, lambda f: f.get("id") == "r1" and bool(f.get("body")), timeout=30)
            redis.stop()
            # The turn goes on streaming to the socket of its own server meanwhile.
            chunks = 0
            while chunks < CHUNKS_WHILE_DOWN:
                frame = await recv_json(here, timeout=30)
                seen.append(frame)
                chunks += frame.get("type") == RESP and bool(frame.get("body"))
            start_again(redis, tmp_path / "redis")
            seen += await recv_until(here, is_done("r1"), timeout=60)
            elsewhere = await recv_until(there, is_done("r1"), timeout=60)
            await here.close()
            await there.close()
            return seen, elsewhere

        seen, elsewhere = asyncio.run(scenario())
        assert text_of(seen) == words
        assert text_of(elsewhere) == words
        history = runner.get_json(f"{path}/get-messages", cookie)
        assert [p.get("text") for p in history[-1]["parts"] if p["type"] == "text"] == [words]
    finally:
        stack.stop()
        redis.stop()
    logs = {server: (tmp_path / f"server-{server.port}.log").read_text(errors="replace").splitlines()
            for server in (runner, watcher)}
    for server, lines in logs.items():
        assert [line for line in lines if "Traceback" in line or "Task exception" in line] == [], server.port
        assert len([line for line in lines if LOST in line]) == 1, [line for line in lines if "Redis" in line]
        assert len([line for line in lines if BACK.search(line)]) == 1, [line for line in lines if "Redis" in line]
    dropped = {server: int(next(BACK.search(line) for line in lines if BACK.search(line)).group(1))
               for server, lines in logs.items()}
    # The runner published chunks for the watcher while Redis was down; the watcher published nothing.
    assert dropped[runner] > 0
    assert dropped[watcher] == 0
