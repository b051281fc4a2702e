"""The checks behind ``/readyz`` (django-health-check's ``HealthCheck``), and the marks they read.

Each check is cheap enough for a probe every second: one database round trip on the process's
database thread (the applied migrations, compared with the ones on disk, read once per process),
one Redis ``PING``, a flag in memory; with ``?full=1`` one sorted-set read for the workers and one
``GET`` for beat. Workers and beat leave their marks in Redis (``operations.tasks``): a worker
every ``WORKER_BEAT_SECONDS``, beat each time it sends a periodic task. docs/operations.md#probes.
"""

import dataclasses
import datetime
import time
from collections.abc import Callable
from typing import Any, ClassVar

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from health_check.base import HealthCheck
from health_check.contrib.redis import Redis
from health_check.exceptions import ServiceUnavailable
from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis

from . import lifecycle

# Redis keys: a sorted set of worker host names scored by their last mark; beat's last tick.
WORKERS_KEY = "think:ops:workers"
BEAT_KEY = "think:ops:beat"
# A worker marks itself this often; one unseen for WORKER_SEEN_WITHIN is not counted.
WORKER_BEAT_SECONDS = 10.0
WORKER_SEEN_WITHIN = 30.0
# Beat sends a task at least every 5 s (the schedule tick); a last tick older than this is a stopped beat.
BEAT_TICK_WITHIN = 30.0
# A probe answers within this, whatever hangs behind it.
PROBE_TIMEOUT = 2.0

# The migrations on disk, read once per process (``warm``): (app, name) pairs.
_on_disk: frozenset[tuple[str, str]] | None = None


def warm() -> None:
    """Read the migrations on disk and open the database connection (on the database thread)."""
    global _on_disk
    _on_disk = frozenset(MigrationLoader(None, ignore_no_migrations=True).disk_migrations)
    connections[DEFAULT_DB_ALIAS].ensure_connection()


def unapplied() -> list[str]:
    """The migrations on disk that the database has not applied (one query)."""
    if _on_disk is None:
        warm()
    assert _on_disk is not None
    applied = set(MigrationRecorder.Migration.objects.values_list("app", "name"))
    return sorted(f"{app}.{name}" for app, name in _on_disk - applied)


def _redis_url() -> str:
    return str(settings.REDIS_URL)


def _async_redis() -> AsyncRedis:
    return AsyncRedis.from_url(_redis_url(), socket_timeout=PROBE_TIMEOUT, socket_connect_timeout=PROBE_TIMEOUT)


def _sync_redis() -> SyncRedis:
    return SyncRedis.from_url(_redis_url(), socket_timeout=PROBE_TIMEOUT, socket_connect_timeout=PROBE_TIMEOUT)


# --- marks (written by workers and beat) ---------------------------------------------------------
def mark_worker(hostname: str) -> None:
    """This worker takes tasks (and forget workers unseen for long)."""
    now = time.time()
    with _sync_redis() as client:
        client.zadd(WORKERS_KEY, {hostname: now})
        client.zremrangebyscore(WORKERS_KEY, "-inf", now - 10 * WORKER_SEEN_WITHIN)


def forget_worker(hostname: str) -> None:
    """This worker stops taking tasks (warm shutdown)."""
    with _sync_redis() as client:
        client.zrem(WORKERS_KEY, hostname)


def mark_beat_tick() -> None:
    with _sync_redis() as client:
        client.set(BEAT_KEY, str(time.time()))


# --- checks --------------------------------------------------------------------------------------
@dataclasses.dataclass
class Probe(HealthCheck):
    """A check of ours: its key in the probe's JSON, and what it measured besides pass or fail."""

    name: ClassVar[str]
    timeout = datetime.timedelta(seconds=PROBE_TIMEOUT)
    detail: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass
class Database(Probe):
    """The database answers and has every migration on disk applied."""

    name: ClassVar[str] = "database"

    async def run(self) -> None:
        try:
            missing = await database_sync_to_async(unapplied)()
        except DatabaseError as exc:
            raise ServiceUnavailable(f"database unreachable: {type(exc).__name__}") from exc
        if missing:
            self.detail["unapplied"] = missing
            raise ServiceUnavailable(f"{len(missing)} migration(s) not applied")


@dataclasses.dataclass
class RedisPing(Redis, Probe):
    """Redis answers ``PING`` (django-health-check's own check, on ``REDIS_URL``)."""

    name: ClassVar[str] = "redis"
    client_factory: Callable[[], AsyncRedis] | None = dataclasses.field(default=_async_redis, repr=False)


@dataclasses.dataclass
class NotDraining(Probe):
    """This process has not been asked to stop taking work (``lifecycle.draining``)."""

    name: ClassVar[str] = "draining"

    async def run(self) -> None:
        if lifecycle.draining():
            raise ServiceUnavailable("this process is draining")


@dataclasses.dataclass
class WorkerSeen(Probe):
    """A Celery worker marked itself within ``WORKER_SEEN_WITHIN``."""

    name: ClassVar[str] = "worker"

    async def run(self) -> None:
        async with _async_redis() as client:
            newest = await client.zrevrange(WORKERS_KEY, 0, 0, withscores=True)
        if not newest:
            raise ServiceUnavailable("no worker seen")
        age = time.time() - float(newest[0][1])
        self.detail["age_s"] = round(age, 1)
        if age > WORKER_SEEN_WITHIN:
            raise ServiceUnavailable(f"no worker seen for {age:.0f} s")


@dataclasses.dataclass
class BeatTick(Probe):
    """Celery beat sent a periodic task within ``BEAT_TICK_WITHIN``; reports its age."""

    name: ClassVar[str] = "beat"

    async def run(self) -> None:
        async with _async_redis() as client:
            last = await client.get(BEAT_KEY)
        if last is None:
            raise ServiceUnavailable("beat has not ticked")
        age = time.time() - float(last)
        self.detail["age_s"] = round(age, 1)
        if age > BEAT_TICK_WITHIN:
            raise ServiceUnavailable(f"beat's last tick was {age:.0f} s ago")


READY: tuple[type[Probe], ...] = (Database, RedisPing, NotDraining)
FULL: tuple[type[Probe], ...] = (*READY, WorkerSeen, BeatTick)
