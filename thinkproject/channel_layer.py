"""The Redis channel layer with a bounded, blocking connection pool per process.

``channels_redis`` builds a plain ``redis.asyncio.ConnectionPool`` per event loop, which raises
``MaxConnectionsError`` ("Too many connections") the moment more coroutines than its size (100 by
default) talk to Redis at once: with a few hundred sockets on one Daphne, a fan-out publish then
failed before the turn was even created. A ``BlockingConnectionPool`` of the same kind makes a
coroutine wait for a free connection instead (up to ``timeout`` seconds), so a burst is served a
little later rather than refused. One pool per event loop is one per Daphne process (one loop).
"""

from typing import Any

from channels_redis.core import RedisChannelLayer
from redis.asyncio import BlockingConnectionPool


class PooledRedisChannelLayer(RedisChannelLayer):
    """``channels_redis``'s layer; each host's ``max_connections`` and ``timeout`` size its blocking pool."""

    def create_pool(self, index: int) -> Any:
        host = dict(self.hosts[index])
        return BlockingConnectionPool.from_url(host.pop("address"), **host)
