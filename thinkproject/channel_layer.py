"""The project's Redis channel layer: a bounded connection pool, and groups fanned out by pub/sub.

Two changes to ``channels_redis``'s core layer, each measured (``bench/README.md``):

**A blocking connection pool.** ``channels_redis`` builds a plain ``redis.asyncio.ConnectionPool``
per event loop, which raises ``MaxConnectionsError`` ("Too many connections") the moment more
coroutines than its size talk to Redis at once: with a few hundred sockets on one Daphne, a fan-out
publish then failed before the turn was even created. A ``BlockingConnectionPool`` makes a
coroutine wait for a free connection instead (up to ``timeout`` seconds).

**Groups in memory, one PUBLISH across processes.** The core layer keeps a group as a sorted set in
Redis and ``group_send`` costs three to four round trips (expire old members, read the members, a
script per shard), plus one blocking pop per receiving channel: about four Redis commands per
streamed batch, most of a reply's cost. Here a group's members are known only to the process that
owns them (channel names of this layer's ``new_channel``; a process only ever adds its own): a
``group_send`` hands the message to this process's members at once, in memory, and sends it to the
other processes with one ``PUBLISH`` on the group's pub/sub channel, to which a process is
subscribed while it has members of that group. A process skips its own publications (tagged with
its ``client_prefix``).

Delivery keeps the guarantees Channels documents for groups and nothing more: in order from one
sender, at most once (a process not yet subscribed, a Redis reconnect or a full channel loses
messages, as a full channel already did in the core layer). The chat fan-out is built for that:
live chunks carry sequence numbers and a receiver re-syncs a gap from the stream buffer
(``agents_app.streaming.items``). ``group_add`` returns once Redis has confirmed the
subscription, so a handshake that starts after it (the resume flush) sees every later message.

**No PUBLISH nobody else reads.** A message its receivers can do without (a live chunk: a gap is
re-sent from the stream buffer) goes through ``group_send_lossy``, which skips the PUBLISH while no
other process is known to have members of the group. A process learns that from each PUBLISH's
count of receivers, and from the notice every process publishes on the notices' topic
(``joins_topic``) when its first member of a group has joined (``group_add``). A chunk published in
the instant between a join and its notice is lost to the joiner and re-synced by the chunks that
follow; everything else always goes out. A count may only say "nobody else" when no join after it
can go unheard: the process listened to the notices (Redis had confirmed that subscription) before
the PUBLISH, and nothing that changes what the count means happened while it was on its way (a
notice came, this process's own subscriptions changed, the subscription connection was lost);
otherwise the next PUBLISH counts again. A count taken before the process listened once made a turn
skip every live chunk to a process that had joined just after it, whose notice nobody heard: its
reader got the chunks only from the stream buffer, at the stream's end.

**Groups that wait for one message share one topic.** A socket open on an address with no row
yet waits in a group for the one message that says the row was made, and leaves it a moment later.
Such a group is joined with ``group_add_shared`` and reached with ``group_send_shared``: its
messages travel on one pub/sub topic for all of them (``shared_topic``, the group's name before the
message), which a process listens to from its first such member on, for good. Joining and leaving
then cost no Redis command (their own SUBSCRIBE and UNSUBSCRIBE were two of a new conversation's
nine, and the UNSUBSCRIBE stood before the conversation's own SUBSCRIBE on the way to its first
turn's first chunk); every listening process hears every such message and keeps those of its
groups. No lossy send reaches these groups, so their joins publish no notice.

**Publications pipelined on a connection of their own.** Each event loop publishes to a host on
one connection it takes from the pool for good (``_Publications``), not a connection checked out
per command: the PUBLISH commands issued while a batch is on its way go out together in the next
write, and their replies are read in order. Through redis-py's pool a PUBLISH cost 60 to 115 µs of
CPU (the pool's checkout and return, a task for the write's timeout), and each was a write that
woke Redis: in a burst of new conversations, a fifth of a server's samples were in redis-py
(``bench/README.md``, "Twenty-first round"). One batch is on its way at a time, so a sender's
publications still arrive in order.

**Point-to-point messages within a process stay in memory.** ``send`` to a channel of this
process (a turn's control channel when the reader who asks it to flush is on the same process,
a reader's own timers) puts the message in the channel's queue at once; the core layer's
``send`` costs four Redis commands, and the pump's pop one more, about 1 ms each way in the
resume handshake's flush (``bench/README.md``, "Sixth round").

**Redis out of reach: one line when it goes, one when it is back.** Every Redis operation of the
layer fails while Redis is down: a PUBLISH per streamed batch, each reader once per retry.
Raised, each publication was a traceback in the server's log (148 in a 3 s outage), and the turn
did not need them: its own process's members get every message in memory, the others re-sync
their gaps from the stream buffer. So a PUBLISH Redis cannot take is dropped, as the delivery
guarantees allow, and counted; the process logs one warning when it loses Redis (the error, on
one line) and one when an operation succeeds again, with the count of what it dropped meanwhile.
A PUBLISH or a point-to-point send is tried once more at once after a connection error: the
pool's connections that Redis closed while it was down each fail once when it is back, and a
reply's end, often the first message after an outage, or the flush request of a socket that
re-syncs the chunks it missed, must not be lost to that. A point-to-point send to another process
(a cancel, a flush request) that still fails raises: its caller decides.

Receiving: every channel of this process reads its own in-memory queue, filled by group
deliveries, by its own process's sends, and by one pump per process that pops the process's
point-to-point messages from other processes (``send`` to a ``new_channel`` name: the resume
handshake's control messages) off Redis. The core
layer instead lets one receiver at a time block on Redis for all of them, which would leave a
message put in memory unseen until the next message from Redis. Receivers must treat a delivered
message as read-only: this process's members of a group share one dict.

**Several event loops in one process.** A Celery worker's thread pool runs each task on an event
loop of its own, all sharing the process's layer: a turn's control channel (its cancel and flush
requests) is received on its task's loop. A message for a channel is put in its queue on the loop
that receives it (``call_soon_threadsafe`` from another thread: a queue woken from a foreign
thread may sleep until its loop wakes for something else). One pump runs at a time, on a loop
that receives: pumps on several loops popped the same Redis list concurrently and tripped over
``channels_redis``'s per-channel lock ("bound to a different event loop"). When its loop ends, a
loop still receiving starts the next.
"""

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool, Connection, ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agents_app.errors import one_line
from agents_app.metrics import instruments as metrics

logger = logging.getLogger(__name__)

# Groups whose remote members a process remembers; past this the memory starts afresh (publish again).
MAX_REMOTE_ENTRIES = 10_000
# After losing a Redis connection it reads from, a process retries this often (seconds).
RECONNECT_SECONDS = 0.5
_T = TypeVar("_T")
# What Redis out of reach raises (down, restarting, or a connection it closed meanwhile).
UNREACHABLE = (RedisConnectionError, RedisTimeoutError)


class Outage:
    """Whether this process has lost Redis, since when, and how many messages it dropped meanwhile.

    ``lost`` logs once per outage, ``back`` once when it ends: the log has one line per event,
    never one per failed operation or retry.
    """

    def __init__(self) -> None:
        self.since: float | None = None
        self.dropped = 0

    def lost(self, error: BaseException) -> None:
        """A Redis operation failed: Redis is out of reach (said once, until it is back)."""
        if self.since is not None:
            return
        self.since, self.dropped = time.monotonic(), 0
        logger.warning("Channel layer lost Redis (%s); messages to other processes are dropped until it is back",
                       one_line(error))

    def drop(self, error: BaseException) -> None:
        """A message for other processes was dropped because of ``error``."""
        self.lost(error)
        self.dropped += 1
        metrics.PUBLISH_FAILURES.inc()

    def back(self) -> None:
        """A Redis operation succeeded: an outage, if any, is over."""
        if self.since is None:
            return
        logger.warning("Channel layer has Redis back after %.1f s; %d message%s to other processes dropped meanwhile",
                       time.monotonic() - self.since, self.dropped, "" if self.dropped == 1 else "s")
        self.since = None


def stopping() -> None:
    """Raise ``CancelledError`` if the running task is being cancelled.

    redis-py can turn a cancellation that meets its read timeout into a ``TimeoutError``: a reading
    loop that takes it for Redis out of reach and reads again never ends, and whoever awaits the
    cancelled task (a process shutting down, ``close_pools``) waits for ever.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class PooledRedisChannelLayer(RedisChannelLayer):
    """``channels_redis``'s layer; each host's ``max_connections`` and ``timeout`` size its blocking pool."""

    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        return BlockingConnectionPool.from_url(host.pop("address"), **host)


class FanoutRedisChannelLayer(PooledRedisChannelLayer):
    """The pooled layer whose groups live in each process and travel between processes by pub/sub."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # group → this process's channels in it.
        self.local_groups: dict[str, set[str]] = {}
        self._origin = self.client_prefix.encode()
        self._subscriber: _Subscriber | None = None
        self._pump: asyncio.Task[None] | None = None
        self._pump_lock = threading.Lock()
        # channel of this process → the event loop receiving on it (while it waits or has messages).
        self._receivers: dict[str, asyncio.AbstractEventLoop] = {}
        # Groups of ``local_groups`` joined with ``group_add_shared``.
        self._shared: set[str] = set()
        # group → whether another process had members at the last PUBLISH or join notice.
        self._remote: dict[str, bool] = {}
        # Join notices heard so far: one heard while a PUBLISH was on its way makes its count stale.
        self._notices = 0
        # event loop → host index → that loop's publications to the host.
        self._publishers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, _Publications]] = (
            weakref.WeakKeyDictionary())
        self.outage = Outage()

    async def receive(self, channel: str) -> dict[str, Any]:
        if "!" not in channel:
            return await super().receive(channel)
        assert self._is_local(channel), "Wrong client prefix"
        loop = asyncio.get_running_loop()
        self._receivers[channel] = loop
        self._start_pump(loop)
        queue = self.receive_buffer[channel]
        try:
            return await queue.get()
        finally:  # also when cancelled (the consumer went): nothing is left of an idle channel
            if queue.empty() and self.receive_buffer.get(channel) is queue:
                del self.receive_buffer[channel]
                self._receivers.pop(channel, None)

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        if not self._is_local(channel):
            await self._once_more(lambda: super(FanoutRedisChannelLayer, self).send(channel, message))
            return
        assert isinstance(message, dict), "message is not a dict"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        assert "__asgi_channel__" not in message
        self._put(channel, dict(message))

    def _put(self, channel: str, message: dict[str, Any], here: asyncio.AbstractEventLoop | None = None) -> None:
        """Into the channel's queue (bounded: a full one drops its oldest), on its receiving loop.

        ``here``: the running loop, if the caller has it (a group delivery puts once per member).
        """
        owner = self._receivers.get(channel)
        if here is None:
            try:
                here = asyncio.get_running_loop()
            except RuntimeError:
                here = None
        if owner is None or owner is here:
            self.receive_buffer[channel].put_nowait(message)
            return
        with contextlib.suppress(RuntimeError):  # its loop has closed: nobody receives there any more
            owner.call_soon_threadsafe(self._put, channel, message)

    def _start_pump(self, loop: asyncio.AbstractEventLoop) -> None:
        """On ``loop`` (the running one), unless a pump runs on any loop already."""
        with self._pump_lock:
            if self._pump is None or self._pump.done():
                self._pump = loop.create_task(self._pump_forever())
                self._pump.add_done_callback(self._pump_ended)

    def _pump_ended(self, pump: "asyncio.Task[None]") -> None:
        """The pump's loop ended (a Celery task's): another loop still receiving starts the next."""
        if pump is not self._pump:
            return  # stopped by ``_stop_then``
        if not pump.cancelled():  # a failure of its own: the next ``receive`` starts another
            logger.error("Channel layer pump stopped: %s", one_line(pump.exception() or RuntimeError("ended")))
            return
        ended = pump.get_loop()
        for channel, loop in list(self._receivers.items()):
            if loop is ended:
                self._receivers.pop(channel, None)
        for loop in set(self._receivers.values()):
            with contextlib.suppress(RuntimeError):  # closed meanwhile: try the next
                loop.call_soon_threadsafe(self._start_pump, loop)
                return

    async def _pump_forever(self) -> None:
        real_channel = f"specific.{self.client_prefix}!"
        index, key = self.consistent_hash(real_channel), self.prefix + real_channel
        while True:
            try:
                # Not ``receive_single``: its per-channel asyncio lock stays bound to the loop of a
                # pump that ended holding it, and the next pump, on another loop, fails on it. One
                # pump at a time needs no lock.
                content = await self._brpop_with_clean(index, key, timeout=self.brpop_timeout)
                if content is not None:
                    message = self.deserialize(content)
                    self._put(message.pop("__asgi_channel__", real_channel), message)
                    await self._clean_receive_backup(index, key)
                # A cancellation can go unraised through the pop: Python 3.11's ``asyncio.wait_for``
                # (redis-py's send, its connect) drops one that comes as what it waits for completes,
                # and the pop then blocks to its timeout. Seen as ``asyncio.run`` ended the loop of a
                # sync caller that had run the pump: without this check it read for ever and the
                # caller never returned.
                stopping()
                if content is None:
                    continue
            except UNREACHABLE as exc:
                stopping()
                self.outage.lost(exc)
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            self.outage.back()

    async def group_add(self, group: str, channel: str) -> None:
        self._check_member(group, channel, shared=False)
        members = self.local_groups.setdefault(group, set())
        members.add(channel)
        first = len(members) == 1
        await self._pubsub().subscribe(self.topic(group), first=first)
        if first:
            await self._publish(0, self.joins_topic, self._origin + group.encode())

    async def group_add_shared(self, group: str, channel: str) -> None:
        """``group_add`` to a group reached only by ``group_send_shared``, on the topic all such
        groups share: once this process listens to it, no Redis command (no SUBSCRIBE, no notice)."""
        self._check_member(group, channel, shared=True)
        self._shared.add(group)
        self.local_groups.setdefault(group, set()).add(channel)
        await self._pubsub().watch(self.shared_topic)

    def _check_member(self, group: str, channel: str, *, shared: bool) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        assert self.require_valid_channel_name(channel), "Channel name not valid"
        assert self._is_local(channel), "Only this process's channels join its groups"
        assert group not in self.local_groups or (group in self._shared) == shared, \
            "A group is joined either with group_add or with group_add_shared"

    async def group_discard(self, group: str, channel: str) -> None:
        members = self.local_groups.get(group)
        if members is None or channel not in members:
            return
        members.discard(channel)
        if not members:
            del self.local_groups[group]
            if group in self._shared:
                self._shared.discard(group)  # the shared topic stays: the next such group needs it
            else:
                await self._pubsub().unsubscribe(self.topic(group))

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        self.deliver_locally(group, message)
        basis = self._count_basis(group)
        receivers = await self._publish(self.consistent_hash(group), self.topic(group),
                                        self._origin + self.serialize(message))
        if receivers is None:
            return  # dropped: what is known of the other processes stays as it was
        if len(self._remote) >= MAX_REMOTE_ENTRIES:
            self._remote.clear()
        after = self._count_basis(group)
        # Not known to be alone unless the count can tell (``_count_basis``): publish next time.
        self._remote[group] = basis is None or basis != after or receivers > basis[2]

    async def group_send_shared(self, group: str, message: dict[str, Any]) -> None:
        """``group_send`` to a group joined with ``group_add_shared``: one PUBLISH on the shared topic."""
        assert self.require_valid_group_name(group), "Group name not valid"
        self.deliver_locally(group, message)
        await self._publish(0, self.shared_topic, self._origin + group.encode() + b" " + self.serialize(message))

    def _count_basis(self, group: str) -> tuple[int, int, int] | None:
        """What a PUBLISH's count of receivers to ``group`` is read against, taken before and after it:
        (changes of this process's subscriptions, join notices heard, this process's own receivers).

        None when a count cannot say that no other process has members: this process does not
        listen to join notices (a join right after the count would go unheard, and nothing would
        correct the count). A different value after the PUBLISH means that something happened
        while it was on its way: the count is not read either. Our own receiver is counted as one
        only when Redis had confirmed the subscription; one in between is taken as none, which at
        worst makes the next chunk published for nothing.
        """
        subscriber = self._subscriber
        if (subscriber is None or subscriber.loop is not asyncio.get_running_loop()
                or not subscriber.confirmed(self.joins_topic)):
            return None
        own = 1 if group in self.local_groups and subscriber.confirmed(self.topic(group)) else 0
        return subscriber.changes, self._notices, own

    def forget_remote(self) -> None:
        """Nothing known of the other processes' members holds any more (join notices were lost)."""
        self._remote.clear()

    async def group_send_lossy(self, group: str, message: dict[str, Any]) -> None:
        """``group_send`` of a message its receivers can do without: no PUBLISH while nobody else listens.

        Only a process that already subscribes (it has members of some group: a Daphne) listens to
        the join notices and may skip; others (a Celery worker's turn) always publish.
        """
        subscriber = self._subscriber
        if subscriber is None or subscriber.loop is not asyncio.get_running_loop():
            await self.group_send(group, message)
            return
        await subscriber.watch(self.joins_topic)
        if self._remote.get(group, True):
            await self.group_send(group, message)
        else:
            self.deliver_locally(group, message)

    async def _publish(self, index: int, topic: str, data: bytes) -> int | None:
        """PUBLISH ``data``; its count of receivers, or None when Redis cannot take it (dropped, counted)."""
        publications = self._publications(index)
        try:
            receivers = await self._once_more(lambda: publications.publish(topic, data))
        except UNREACHABLE as exc:
            self.outage.drop(exc)
            return None
        return int(receivers)

    def _publications(self, index: int) -> "_Publications":
        hosts = self._publishers.setdefault(asyncio.get_running_loop(), {})
        publications = hosts.get(index)
        if publications is None:
            publications = hosts[index] = _Publications(self.connection(index).connection_pool)
        return publications

    async def _once_more(self, operation: Callable[[], Awaitable[_T]]) -> _T:
        """``operation``, tried once more after a connection error; what the second try raises is raised.

        Before the second try the pools' idle connections are dropped: Redis closed them when it
        went away, and each would fail once now that it is back. A timeout is not tried again
        (the command may have been carried out).
        """
        try:
            try:
                result = await operation()
            except RedisConnectionError:
                for index in range(len(self.hosts)):
                    with contextlib.suppress(RedisError, OSError):
                        await self.connection(index).connection_pool.disconnect(inuse_connections=False)
                result = await operation()
        except UNREACHABLE as exc:
            self.outage.lost(exc)
            raise
        self.outage.back()
        return result

    def deliver_locally(self, group: str, message: dict[str, Any]) -> None:
        """Hand ``message`` to this process's members of ``group`` (each channel's bounded queue)."""
        members = self.local_groups.get(group, ())
        here = asyncio.get_running_loop() if members else None
        for channel in members:
            self._put(channel, message, here)

    def on_publication(self, topic: bytes, data: bytes) -> None:
        """A message another process sent to a group this process has members of."""
        if data.startswith(self._origin):
            return
        payload, name = data[len(self._origin):], topic.decode()
        if name == self.joins_topic:
            self._notices += 1
            self._remote[payload.decode()] = True
        elif name == self.shared_topic:
            head, _, body = payload.partition(b" ")  # group names have no space
            if (group := head.decode()) in self.local_groups:  # else a group of another process's
                self.deliver_locally(group, self.deserialize(body))
        else:
            self.deliver_locally(name[len(self.topic("")):], self.deserialize(payload))

    async def flush(self) -> None:
        await self._stop_then(super().flush)

    async def close_pools(self) -> None:
        """Stop the pump and the subscription, then close the pools, deleting nothing in Redis (a
        process that stops: the pump would otherwise read from a closed connection and report an outage)."""
        await self._stop_then(super().close_pools)

    async def _stop_then(self, then: Callable[[], Awaitable[None]]) -> None:
        # The groups and the subscription go even when Redis fails ``then``: a subscription left
        # behind would keep receiving the groups' publications.
        try:
            pump, self._pump = self._pump, None
            if pump is not None and pump.get_loop() is asyncio.get_running_loop():
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            elif pump is not None:
                with contextlib.suppress(RuntimeError):  # its loop has closed, and the pump with it
                    pump.get_loop().call_soon_threadsafe(pump.cancel)
            await then()
        finally:
            self.local_groups.clear()
            self._shared.clear()
            for publications in self._publishers.pop(asyncio.get_running_loop(), {}).values():
                await publications.close()
            if self._subscriber is not None:
                await self._subscriber.close()
                self._subscriber = None

    def topic(self, group: str) -> str:
        """The pub/sub channel of ``group``."""
        return f"{self.prefix}:fanout:{group}"

    @property
    def joins_topic(self) -> str:
        """Where a process says that its first member of a group has joined (the group's name)."""
        return f"{self.prefix}:fanout-joins"

    @property
    def shared_topic(self) -> str:
        """Where the messages of every group joined with ``group_add_shared`` travel."""
        return f"{self.prefix}:fanout-shared"

    def _is_local(self, channel: str) -> bool:
        return "!" in channel and self.non_local_name(channel).endswith(self.client_prefix + "!")

    def _pubsub(self) -> "_Subscriber":
        # One subscriber per event loop: a Daphne has one; a Celery task's loop is short-lived.
        loop = asyncio.get_running_loop()
        if self._subscriber is None or self._subscriber.loop is not loop:
            self._subscriber = _Subscriber(self, loop)
        return self._subscriber


class _Publications:
    """One event loop's PUBLISH commands to one host, pipelined on a connection of their own (module
    docstring): those queued while a batch is on its way leave together with the next, and each
    gets its reply, in order. A batch that fails fails each of its commands with the error (the
    layer tries once more, as through the pool); the connection opens again with the next batch."""

    def __init__(self, pool: ConnectionPool) -> None:
        # The connection is the pool's, taken for good: closing the pool (``close_pools``, or the
        # end of its event loop) closes it too.
        self._pool = pool
        self._connection: Connection | None = None
        # (topic, data, future of its reply) of the PUBLISH commands waiting for the next batch.
        self._queued: list[tuple[str, bytes, asyncio.Future[Any]]] = []
        self._sender: asyncio.Task[None] | None = None

    async def publish(self, topic: str, data: bytes) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._queued.append((topic, data, future))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())
        return await future

    async def _send(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    if self._connection is None:
                        self._connection = await self._pool.get_connection()
                    connection = self._connection
                    await connection.send_packed_command(connection.pack_commands(
                        ("PUBLISH", topic, data) for topic, data, _ in batch), check_health=False)
                    for _, _, future in batch:
                        reply = await connection.read_response()
                        if not future.done():  # its caller may have been cancelled
                            future.set_result(reply)
                except BaseException as exc:
                    if self._connection is not None:
                        await self._connection.disconnect(nowait=True)
                    cancelled = isinstance(exc, asyncio.CancelledError)
                    for _, _, future in batch:
                        if future.done():
                            continue
                        if cancelled:  # the layer is closing: its callers are cancelled too
                            future.cancel()
                        else:
                            future.set_exception(exc)
                    if cancelled:
                        raise
        finally:
            self._sender = None

    async def close(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        for _, _, future in self._queued:
            future.cancel()
        self._queued = []
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.disconnect()
            await self._pool.release(connection)


class _Subscriber:
    """One pub/sub connection of a process (and event loop) and the task reading it.

    ``subscribe`` waits for Redis's confirmation, read by the reader task like any message: after
    it returns, every later publication to the topic reaches this process. ``confirmed`` says
    whether that holds for a topic now, and ``changes`` counts the changes of what it says (the
    layer reads a PUBLISH's count of receivers only if none came while the PUBLISH was on its way).
    """

    def __init__(self, layer: FanoutRedisChannelLayer, loop: asyncio.AbstractEventLoop) -> None:
        self.layer = layer
        self.loop = loop
        host = dict(layer.hosts[0])
        # Its own connection, with no read timeout: an idle subscription is not an error.
        self.redis = Redis.from_url(host["address"], socket_timeout=None)
        self.pubsub: PubSub = self.redis.pubsub()
        self._confirmations: dict[bytes, asyncio.Future[None]] = {}
        # Topics this process wants, and per topic its (un)subscribe commands Redis has not
        # answered yet: Redis answers each in order, so a wanted topic with none left is subscribed.
        self._wanted: set[bytes] = set()
        self._unanswered: dict[bytes, int] = {}
        self.changes = 0
        self._reader: asyncio.Task[None] | None = None
        self._watching: set[str] = set()
        # redis-py's PubSub opens its connection on the first command: concurrent first commands
        # would each open one (hundreds of sockets joining at once exhausted the pool).
        self._commands = asyncio.Lock()

    async def subscribe(self, topic: str, *, first: bool) -> None:
        """Subscribe for the group's first member; a later member waits for the same confirmation."""
        key = topic.encode()
        if first:
            confirmed = self._confirmations[key] = self.loop.create_future()
            self._issue(key, wanted=True)
            async with self._commands:
                await self.pubsub.subscribe(topic)
            self._read()
        elif (confirmed := self._confirmations.get(key)) is None:
            return
        await asyncio.shield(confirmed)

    async def watch(self, topic: str) -> None:
        """Listen to ``topic`` for good (subscribed once per subscriber; waits for the first confirmation)."""
        first = topic not in self._watching
        self._watching.add(topic)
        await self.subscribe(topic, first=first)

    def confirmed(self, topic: str) -> bool:
        """Whether every publication to ``topic`` reaches this process now."""
        key = topic.encode()
        return key in self._wanted and not self._unanswered.get(key)

    def _issue(self, key: bytes, *, wanted: bool) -> None:
        """A (un)subscribe command is about to leave (in call order: ``_commands`` is FIFO)."""
        if wanted:
            self._wanted.add(key)
        else:
            self._wanted.discard(key)
        self._unanswered[key] = self._unanswered.get(key, 0) + 1
        self.changes += 1

    def _answered(self, key: bytes) -> None:
        """Redis answered a (un)subscribe command for ``key``. One nobody is waiting for is redis-py
        subscribing again on a new connection: what was published meanwhile, join notices
        included, is lost, so nothing known of the other processes' members holds."""
        left = self._unanswered.pop(key, 0) - 1
        if left > 0:
            self._unanswered[key] = left
        elif left < 0:
            self.layer.forget_remote()
        self.changes += 1

    def _lost_connection(self) -> None:
        """The subscription connection failed: every wanted topic waits for redis-py's new subscription."""
        self._unanswered = dict.fromkeys(self._wanted, 1)
        self.changes += 1
        self.layer.forget_remote()

    async def unsubscribe(self, topic: str) -> None:
        # Before the command leaves: a count taken from now on may or may not include ours.
        self._issue(topic.encode(), wanted=False)
        with contextlib.suppress(RedisConnectionError):
            async with self._commands:
                await self.pubsub.unsubscribe(topic)

    def _read(self) -> None:
        if self._reader is None or self._reader.done():
            self._reader = self.loop.create_task(self._read_forever())

    async def _read_forever(self) -> None:
        while self.pubsub.subscribed:
            try:
                message = await self.pubsub.get_message(timeout=None)
            except UNREACHABLE as exc:
                stopping()
                # redis-py subscribes again when it reconnects; what was published meanwhile is lost,
                # join notices too: other processes may have members this one has not heard of.
                self.layer.outage.lost(exc)
                self._lost_connection()
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            if message is None:
                continue
            self.layer.outage.back()
            kind, topic = message["type"], message["channel"]
            if kind == "message":
                try:
                    self.layer.on_publication(topic, message["data"])
                except Exception:  # one bad message must not stop the process's fan-out
                    logger.exception("Undeliverable publication on %s", topic)
            elif kind in ("subscribe", "unsubscribe"):
                self._answered(topic)
            if kind == "subscribe":
                confirmed = self._confirmations.pop(topic, None)
                if confirmed is not None and not confirmed.done():
                    confirmed.set_result(None)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self.pubsub.aclose()
        await self.redis.aclose()
