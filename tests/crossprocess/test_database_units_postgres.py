"""``agents_app.database.run`` on PostgreSQL: a unit of a turn that is the only one on the
process's loop runs on the loop's thread, with that thread's connection, checked as a hop checks
the database thread's; otherwise, or from a loop on a thread of its own, it hops.

A script process (the production settings on a fresh PostgreSQL database) runs the units and
says where each ran and what a connection of its own then reads.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.support.live import LiveStack, ScriptProcess, database_url

pytestmark = pytest.mark.crossprocess

SCRIPT = r"""
import asyncio
import json
import threading

import django
django.setup()

from django.db import connection, connections, transaction

from agents_app import database

def unit(value):
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE IF NOT EXISTS unit_rows (v integer)")
            cursor.execute("INSERT INTO unit_rows VALUES (%s)", [value])
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]
    return threading.get_ident(), backend

def count():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM unit_rows")
        return cursor.fetchone()[0]

def obsolete():
    # The connection of the loop's thread is past its CONN_MAX_AGE: the next unit's check replaces it.
    with database._as_the_threads():
        connections["default"].close_at = 0

async def main(report):
    loop_thread = threading.get_ident()
    alone = [await database.run(unit, index, alone=True) for index in (1, 2)]
    obsolete()
    replaced = await database.run(unit, 3, alone=True)
    hopped = await database.run(unit, 4)
    report["alone"] = [thread == loop_thread for thread, _ in alone] + [replaced[0] == loop_thread]
    report["same_connection"] = alone[0][1] == alone[1][1]
    report["replaced"] = replaced[1] != alone[1][1]
    report["hopped"] = hopped[0] != loop_thread and hopped[1] != replaced[1]
    report["rows"] = await database.run(count)

def on_a_thread_of_its_own(report):
    async def call():
        thread, _ = await database.run(unit, 5, alone=True)
        report["own_thread_hopped"] = thread != threading.get_ident()
    asyncio.run(call())

report = {}
asyncio.run(main(report))
runner = threading.Thread(target=on_a_thread_of_its_own, args=(report,))
runner.start()
runner.join(60)
print(json.dumps(report), flush=True)
"""


def test_a_lone_turns_units_run_on_the_loop_on_postgresql(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = database_url(request, "postgres", tmp_path, "units")
    stack = LiveStack(tmp_path, "redis://127.0.0.1:9/0", url, extra_env={"CHANNEL_LAYER": "memory"})
    report: dict[str, Any] = ScriptProcess(SCRIPT, stack.env, tmp_path / "script.log").receive(timeout=120)
    assert report == {"alone": [True, True, True], "same_connection": True, "replaced": True, "hopped": True,
                      "rows": 4, "own_thread_hopped": True}
