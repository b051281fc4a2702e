"""A Celery worker's and beat's part in operations (registered through ``agents_app.tasks``).

A worker, once ready, runs the start-up hooks (``lifecycle``) and marks itself in Redis every
``health.WORKER_BEAT_SECONDS`` for ``/readyz?full=1``. On warm shutdown (``SIGTERM``) it stops
taking tasks, as Celery does, drains, removes its mark, lets the task it runs finish (a turn it
runs ends normally), then runs the shutdown hooks. Beat marks each periodic task it sends.
"""

import logging
import threading
import time
from typing import Any

from celery.concurrency import get_implementation
from celery.signals import (
    beat_init,
    before_task_publish,
    worker_init,
    worker_ready,
    worker_shutdown,
    worker_shutting_down,
)
from django.db import connections
from redis.exceptions import RedisError

from ..turns.control import run_sync, use_one_loop
from . import health, lifecycle, server

logger = logging.getLogger("agents_app.operations")

_stop_marking = threading.Event()
_in_beat = False
_last_beat_mark = 0.0


def _mark_worker_forever(hostname: str) -> None:
    failing = False
    while not _stop_marking.is_set():
        try:
            health.mark_worker(hostname)
            failing = False
        except RedisError as exc:
            if not failing:  # one line when Redis goes away, not one per beat
                logger.warning("Cannot mark worker %s in Redis: %s", hostname, exc)
            failing = True
        _stop_marking.wait(health.WORKER_BEAT_SECONDS)


# Pools whose tasks run in this process's threads: their engine work can share one event loop. A
# prefork child keeps a loop per task (a loop thread and its database thread do not survive a fork).
_ONE_PROCESS_POOLS = ("celery.concurrency.thread", "celery.concurrency.solo")


@worker_init.connect
def on_worker_init(sender: Any = None, **kwargs: Any) -> None:
    """Before the pool starts: a threads or solo worker runs its tasks' engine work on one event
    loop (``control.use_one_loop``), as a server does (docs/operations.md#workers). The MCP client
    is imported now if an agent class declares servers, so that prefork children inherit it."""
    pool = get_implementation(getattr(sender, "pool_cls", None) or "prefork")
    if pool.__module__ in _ONE_PROCESS_POOLS:
        use_one_loop()
    try:
        server.load_mcp_client_if_declared()
    except Exception:  # the first turn reports what cannot be built
        logger.exception("Importing the MCP client failed; the first MCP connection imports it")


@worker_ready.connect
def on_worker_ready(sender: Any = None, **kwargs: Any) -> None:
    try:
        server.warm_models()
    except Exception:  # the first turn reports what cannot be built
        logger.exception("Warming the worker failed; it starts cold")
    finally:
        connections.close_all()  # the connection of warming's read: a task opens its own as it needs one
    run_sync(lifecycle.run_startup)
    hostname = getattr(sender, "hostname", "worker")
    threading.Thread(target=_mark_worker_forever, args=(hostname,), name="think-worker-mark", daemon=True).start()


@worker_shutting_down.connect
def on_worker_shutting_down(sender: Any = None, **kwargs: Any) -> None:
    """Warm shutdown began (in the signal handler): not ready from now on."""
    lifecycle.start_draining()
    _stop_marking.set()
    try:
        health.forget_worker(str(sender))
    except RedisError as exc:
        logger.warning("Cannot remove worker %s's mark from Redis: %s", sender, exc)


@worker_shutdown.connect
def on_worker_shutdown(sender: Any = None, **kwargs: Any) -> None:
    run_sync(lifecycle.run_shutdown)
    run_sync(server.close)
    connections.close_all()


@beat_init.connect
def on_beat_init(sender: Any = None, **kwargs: Any) -> None:
    global _in_beat
    _in_beat = True


@before_task_publish.connect
def on_task_publish(sender: Any = None, **kwargs: Any) -> None:
    """In beat: each periodic task sent is a tick (marked at most once a second)."""
    global _last_beat_mark
    now = time.monotonic()
    if not _in_beat or now - _last_beat_mark < 1.0:
        return
    _last_beat_mark = now
    try:
        health.mark_beat_tick()
    except RedisError as exc:
        logger.warning("Cannot mark beat's tick in Redis: %s", exc)
