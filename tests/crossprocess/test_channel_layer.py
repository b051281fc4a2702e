"""The project's channel layer on a real Redis: groups in memory, one PUBLISH across processes.

Each ``FanoutRedisChannelLayer`` instance has its own client prefix, subscription and pump, as a
process does; two of them in one event loop are two processes as far as Redis can tell. The live
suites (two Daphnes, Celery workers) run every chat feature over this layer as well.
"""

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis import Redis

from tests.support.live import PYTHON, ROOT, RedisServer
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
