"""How long a wait for a turn takes to see the turn end, on PostgreSQL: LISTEN/NOTIFY against polling.

    .venv/bin/python -m bench.waits [--waits 20]

A REST ``wait=true`` (``conversations.service.wait``) waits on a thread of this process for a
running turn; another connection ends the turn at a random moment 0-2 s later, as the process
running it would. Printed per mode (``AGENT_LISTEN_NOTIFY`` on, the default, and off: polling
every ``WAIT_POLL_SECONDS``): the median and p95 of the time from that commit to the wait's return,
and the statements the waiter sent per second of waiting. A throwaway PostgreSQL cluster
(``tests.support.live.PostgresServer``), the production settings, this process.
"""

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._stack import median, p95


def _row(listen: bool, waits: int, database_url: str) -> dict[str, Any]:
    import psycopg
    from django.db import connection
    from django.test import override_settings

    from agents_app.conversations import service
    from agents_app.models import AgentInstance, Turn

    instance = AgentInstance.objects.create(slug="demo-agent", name=f"waits-{listen}")
    latencies, statements, waited = [], 0, 0.0
    with override_settings(AGENT_LISTEN_NOTIFY=listen), psycopg.connect(database_url, autocommit=True) as other:
        for index in range(waits):
            turn = Turn.objects.create(instance=instance, request_id=f"r{index}", status=Turn.Status.RUNNING)
            returned: list[float] = []
            counted: list[int] = []

            def wait(turn: Turn = turn, returned: list[float] = returned, counted: list[int] = counted) -> None:
                count = [0]

                def counter(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
                    count[0] += 1
                    return execute(sql, params, many, context)

                with connection.execute_wrapper(counter):
                    service.wait(turn, timeout=30)
                returned.append(time.monotonic())
                counted.append(count[0])
                connection.close()

            waiter = threading.Thread(target=wait)
            started = time.monotonic()
            waiter.start()
            time.sleep(random.uniform(0, 2))
            other.execute("UPDATE agents_app_turn SET status = 'completed' WHERE id = %s", [turn.pk])
            ended = time.monotonic()
            waiter.join()
            latencies.append((returned[0] - ended) * 1000)
            statements += counted[0]
            waited += returned[0] - started
    return {"mode": "LISTEN/NOTIFY" if listen else f"polling every {service.WAIT_POLL_SECONDS * 1000:.0f} ms",
            "median": median(latencies), "p95": p95(latencies), "statements_per_s": statements / waited}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waits", type=int, default=20, help="waits per mode (default 20)")
    args = parser.parse_args()
    from bench.turn_cost import _configure
    from tests.support.live import PostgresServer

    with tempfile.TemporaryDirectory(prefix="bench-waits-") as workdir:
        postgres = PostgresServer(Path(workdir))
        try:
            url = postgres.new_database("waits")
            _configure(workdir, url)
            rows = [_row(listen, args.waits, url) for listen in (True, False)]
        finally:
            postgres.stop()
    print(f"## bench/waits.py: {args.waits} REST waits per mode, PostgreSQL")
    print("| mode | turn ended → wait returned, median ms | p95 ms | waiter's statements per s of waiting |")
    print("|---|--:|--:|--:|")
    for row in rows:
        print(f"| {row['mode']} | {row['median']:.1f} | {row['p95']:.1f} | {row['statements_per_s']:.1f} |")


if __name__ == "__main__":
    main()
