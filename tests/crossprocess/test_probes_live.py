"""``/healthz`` and ``/readyz`` on live servers (docs/operations.md#probes): no login, JSON, 200 or 503.

Readiness follows what it checks: a worker stopped, a process draining (``SIGUSR1``), a migration
rolled back, Redis stopped; liveness stays 200 throughout.
"""

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.live import LiveStack, RedisServer, Server
from tests.support.waiting import wait_until

pytestmark = pytest.mark.crossprocess

MIGRATIONS = Path(__file__).resolve().parents[2] / "agents_app" / "migrations"


def probe(server: Server, path: str) -> tuple[int, dict[str, Any]]:
    """GET ``path`` without a session: its status and JSON body (a 503 is JSON too)."""
    try:
        with urllib.request.urlopen(f"{server.http}{path}", timeout=10) as response:
            status, kind, body = response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        status, kind, body = error.code, error.headers["Content-Type"], error.read()
    assert kind == "application/json", (status, body)
    return status, json.loads(body)


def failing(body: dict[str, Any]) -> set[str]:
    return {name for name, check in body["checks"].items() if not check["ok"]}


def test_probes_follow_workers_beat_and_draining(stack: LiveStack) -> None:
    server = stack.start_server()
    worker = stack.start_celery_worker()
    stack.start_celery_beat()
    assert probe(server, "/healthz") == (200, {"status": "ok", "pid": server.proc.pid, "draining": False})
    status, body = probe(server, "/readyz")
    assert (status, body["status"], set(body["checks"])) == (200, "ok", {"database", "redis", "draining"})
    # The whole system: the worker's mark and beat's first tick reach Redis.
    body = wait_until(
        lambda: (r := probe(server, "/readyz?full=1"))[0] == 200 and r[1],
        "a full ready answer",
        timeout=30,
        on_timeout=stack.print_logs,
    )
    assert body["checks"]["worker"]["age_s"] < 30 and body["checks"]["beat"]["age_s"] < 30
    # A worker's warm shutdown takes its mark away: the system is no longer ready, this process is.
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)
    status, body = probe(server, "/readyz?full=1")
    assert (status, failing(body)) == (503, {"worker"})
    assert body["checks"]["worker"]["error"] == "Unavailable: no worker seen"
    assert probe(server, "/readyz")[0] == 200
    # Draining: not ready, still alive and serving.
    server.proc.send_signal(signal.SIGUSR1)
    wait_until(lambda: probe(server, "/readyz")[0] == 503, "readyz to say draining", timeout=10)
    status, body = probe(server, "/readyz")
    assert (status, body["status"], failing(body)) == (503, "unavailable", {"draining"})
    assert probe(server, "/healthz") == (200, {"status": "ok", "pid": server.proc.pid, "draining": True})
    log = (stack.workdir / f"server-{server.port}.log").read_text()
    assert "Application startup complete." in log
    assert "ASGI 'lifespan' protocol appears unsupported" not in log


def test_readyz_needs_every_migration(stack: LiveStack) -> None:
    server = stack.start_server()
    *_, previous, last = sorted(p.stem for p in MIGRATIONS.glob("0*.py"))
    stack.manage("migrate", "agents_app", previous)
    status, body = probe(server, "/readyz")
    assert (status, failing(body)) == (503, {"database"})
    assert body["checks"]["database"]["unapplied"] == [f"agents_app.{last}"]
    stack.manage("migrate", "agents_app")
    assert probe(server, "/readyz")[0] == 200


def test_readyz_without_redis(tmp_path: Path) -> None:
    redis = RedisServer(tmp_path)
    live = LiveStack(tmp_path, redis.url)
    try:
        server = live.start_server()
        assert probe(server, "/readyz")[0] == 200
        redis.stop()
        status, body = probe(server, "/readyz")
        assert (status, failing(body)) == (503, {"redis"})
        assert body["checks"]["redis"]["error"].startswith("Unavailable: Unable to connect to Redis")
        assert probe(server, "/healthz")[0] == 200
    finally:
        live.stop()
        redis.stop()
