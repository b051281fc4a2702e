"""Waits for turns on PostgreSQL (``agents_app.waits``): a waiter is woken by the NOTIFY that a change
of a turn's status sends, from any connection, instead of its next poll.

A script process (the production settings on a fresh PostgreSQL database) waits with polls and
fallbacks of ten minutes; the test changes the turn's status on a connection of its own, as
another process would. An answer within the receive timeout can only come from the notification.
The listener's connection is then ended by the server (``pg_terminate_backend``): the waiter polls
meanwhile, the log says so once, and notifications wake it again once the listener is back.
"""

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.live import LiveStack, ScriptProcess, database_url

pytestmark = pytest.mark.crossprocess

SCRIPT = r"""
import asyncio
import json
import sys
import threading
import time

import django
django.setup()

from django.db import close_old_connections

from agents_app import waits
from agents_app.conversations import service
from agents_app.lifecycle import service as lifecycle
from agents_app.models import AgentInstance, Turn

TEN_MINUTES = 600.0
waits.FALLBACK_SECONDS = TEN_MINUTES
service.WAIT_POLL_SECONDS = TEN_MINUTES
lifecycle.POLL_SECONDS = TEN_MINUTES

def say(**report):
    print(json.dumps(report), flush=True)

def until(condition):
    while not condition():
        time.sleep(0.01)

instance = AgentInstance.objects.create(slug="demo-agent", name="waits")
# A watch of another instance keeps the listener up between the waits below.
keeper = waits.watching([0])
keeper.__enter__()
until(lambda: waits._listener().listening)
say(instance=instance.pk)

for command in map(json.loads, sys.stdin):
    close_old_connections()
    if command["wait"] == "listener":
        say(listening=waits._listener().listening, connections=waits._listener().connection_number)
        continue
    turn = Turn.objects.create(instance=instance, request_id=command["request_id"], status=Turn.Status.RUNNING)
    if command["wait"] == "rest":
        # The REST API's wait=true, on a thread as a sync view runs.
        result = {}
        waiter = threading.Thread(target=lambda: result.update(turn=service.wait(turn, timeout=TEN_MINUTES)))
        waiter.start()
        say(turn=turn.pk)
        waiter.join()
        say(status=result["turn"].status)
    elif command["wait"] == "destroy":
        # destroy's wait for the instance's running turns to end, on an event loop.
        async def settle():
            return await lifecycle._settled([instance.pk], TEN_MINUTES)
        async def main():
            settling = asyncio.ensure_future(settle())
            await asyncio.sleep(0)
            say(turn=turn.pk)
            return await settling
        say(settled=asyncio.run(main()))
"""


def _set_status(url: str, turn: int, status: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("UPDATE agents_app_turn SET status = %s WHERE id = %s", [status, turn])


def test_waits_are_woken_by_the_status_notification(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = database_url(request, "postgres", tmp_path, "waits")
    stack = LiveStack(tmp_path, "redis://127.0.0.1:9/0", url, extra_env={"CHANNEL_LAYER": "memory"})
    log = tmp_path / "script.log"
    script = ScriptProcess(SCRIPT, stack.env, log)
    try:
        assert "instance" in script.receive(timeout=120)

        script.send(request_id="r1", wait="rest")
        turn = script.receive()["turn"]
        _set_status(url, turn, "completed")
        assert script.receive() == {"status": "completed"}

        script.send(request_id="r2", wait="destroy")
        turn = script.receive()["turn"]
        _set_status(url, turn, "aborted")
        assert script.receive() == {"settled": True}

        # The server ends the listener's connection: one line in the log, and it listens again.
        before = script.ask(wait="listener")
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                               " WHERE query = 'LISTEN agents_app_turns'")
        again: dict[str, Any] = {}
        for _ in range(600):
            again = script.ask(wait="listener")
            if again["listening"] and again["connections"] > before["connections"]:
                break
            time.sleep(0.05)
        assert again["listening"] and again["connections"] == before["connections"] + 1

        script.send(request_id="r3", wait="rest")
        turn = script.receive()["turn"]
        _set_status(url, turn, "error")
        assert script.receive() == {"status": "error"}
    finally:
        script.proc.kill()
        script.proc.wait(10)
    text = log.read_text()
    assert text.count("lost their PostgreSQL listener") == 1, text
    assert text.count("have their PostgreSQL listener back") == 1, text
