"""Fixtures for tests that run real servers: one Redis per module, one PostgreSQL per run, one stack per test."""

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live import LiveStack, PostgresServer, RedisServer, database_url


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def stack(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Iterator[LiveStack]:
    live = LiveStack(tmp_path, redis.url)
    yield live
    live.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        live.print_logs()


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the run; each test makes its own database on it (a copy of
    the migrated template, ``LiveStack``)."""
    # Not under pytest's tmp_path: its parents are mode 0700 and the server runs as "postgres".
    workdir = Path(tempfile.mkdtemp(prefix="crossprocess-pg-"))
    server = PostgresServer(workdir)
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL of the test's own: an SQLite file, or a new database on the module's PostgreSQL."""
    return database_url(request, request.param, tmp_path, "test")
