"""``thinkproject.postgresql``: a connection whose last commit is younger than ``HEALTH_CHECK_DELAY``
is used without Django's health check (``SELECT 1``); an older one, or any with a delay of 0, is
checked as Django checks it, and a dead one is replaced before the request's first statement.

The server is a real PostgreSQL cluster; the backend is killed from another session
(``pg_terminate_backend``), as a restart or an idle timeout would kill it.
"""

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import OperationalError
from django.db.utils import ConnectionHandler

from tests.support.live import PostgresServer
from thinkproject.postgresql.base import DatabaseWrapper

pytestmark = [pytest.mark.crossprocess, pytest.mark.requires_postgres]

# Opens a connection of the project's backend with the given HEALTH_CHECK_DELAY (``connect``).
Connect = Callable[[float], DatabaseWrapper]


@pytest.fixture
def url(postgres: PostgresServer, django_db_blocker: Any) -> Iterator[str]:
    """A fresh database; these tests open their own connections, not the test database."""
    with django_db_blocker.unblock():
        yield postgres.new_database("backend")


@pytest.fixture
def connect(url: str) -> Iterator[Connect]:
    """Opens connections of the project's backend to ``url`` with a given delay; closed after."""
    opened: list[DatabaseWrapper] = []

    def connection(delay: float) -> DatabaseWrapper:
        handler = ConnectionHandler({"default": {
            "ENGINE": "thinkproject.postgresql", "NAME": url.rsplit("/", 1)[1], "USER": "postgres",
            "HOST": "127.0.0.1", "PORT": url.rsplit(":", 1)[1].split("/", 1)[0],
            "CONN_MAX_AGE": 600, "CONN_HEALTH_CHECKS": True, "HEALTH_CHECK_DELAY": delay,
        }})
        opened.append(handler["default"])
        return opened[-1]

    yield connection
    for connection_made in opened:
        connection_made.close()


def _committed_request(connection: DatabaseWrapper) -> int:
    """One request that commits a transaction, as a turn's unit does; the backend's pid."""
    connection.close_if_unusable_or_obsolete()  # a request's start (``close_old_connections``)
    connection.set_autocommit(False)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = int(cursor.fetchone()[0])
    connection.commit()
    connection.set_autocommit(True)
    connection.close_if_unusable_or_obsolete()  # its end
    return pid


def _kill(url: str, pid: int) -> None:
    with psycopg.connect(url, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 10000)", [pid])


def _next_request_pid(connection: DatabaseWrapper) -> int:
    connection.close_if_unusable_or_obsolete()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def test_a_connection_that_just_committed_is_not_checked_again(url: str, connect: Connect) -> None:
    connection = connect(600)
    pid = _committed_request(connection)
    _kill(url, pid)
    # No ``SELECT 1`` before the request's first statement: that statement meets the dead
    # connection itself (the trade the delay makes) ...
    with pytest.raises(OperationalError):
        _next_request_pid(connection)
    # ... and the request after it finds the connection failed, checks it and opens a new one.
    assert _next_request_pid(connection) != pid


def test_without_a_delay_every_request_checks_the_connection_first(url: str, connect: Connect) -> None:
    connection = connect(0)
    pid = _committed_request(connection)
    _kill(url, pid)
    # Django's own behaviour: the check finds the connection dead and replaces it unseen.
    assert _next_request_pid(connection) != pid


def test_a_connection_that_never_committed_is_checked(url: str, connect: Connect) -> None:
    connection = connect(600)
    pid = _next_request_pid(connection)  # autocommit reads only: nothing proves it since it opened
    _kill(url, pid)
    assert _next_request_pid(connection) != pid


def test_a_connection_whose_last_commit_is_older_than_the_delay_is_checked(url: str, connect: Connect) -> None:
    connection = connect(600)
    pid = _committed_request(connection)
    connection._proved_at -= 601  # the commit, as if ten minutes ago
    _kill(url, pid)
    assert _next_request_pid(connection) != pid
