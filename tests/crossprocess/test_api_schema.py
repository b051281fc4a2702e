"""Every documented endpoint of the REST API, against generated input, on a running server.

Schemathesis reads the served schema (/api/schema/) and sends each operation its examples, the
boundary cases the schema implies, and random valid and invalid input, as a staff user with a
token (so approvals and ``?owner=`` are in play), with a Celery worker running the turns the
messages start. The check: no 500, whatever comes in. PostgreSQL, as in production: it refuses
some input (NUL characters) that SQLite stores.
"""

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.support.live import LiveStack, PostgresServer, RedisServer

pytestmark = [pytest.mark.crossprocess, pytest.mark.requires_postgres]

SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))
# Per operation: enough generated cases to reach the error paths, few enough to keep the run short.
MAX_EXAMPLES = 40
# The whole run's ceiling (it takes about 20 s on an idle machine).
RUN_TIMEOUT = 240
SEED = """
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from agents_app.registry import open_instance
staff = get_user_model().objects.get(username="root")
for name in ("default", "old-notes"):  # what the schema's examples address (old-notes: to delete)
    open_instance("demo-agent", name, staff)
print(Token.objects.create(user=staff).key)
"""


def test_no_generated_request_gets_a_server_error(tmp_path: Path, redis: RedisServer,
                                                  postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute('CREATE DATABASE "schemathesis"')
    stack = LiveStack(tmp_path, redis.url, postgres.url.rsplit("/", 1)[0] + "/schemathesis")
    try:
        stack.create_user("root", staff=True)
        token = stack.manage("shell", "--no-imports", "-c", SEED).split()[-1]
        stack.start_celery_worker()
        daphne = stack.start_server()
        run = subprocess.run(
            [SCHEMATHESIS, "run", f"{daphne.http}/api/schema/", "--checks", "not_a_server_error",
             "--header", f"Authorization: Token {token}", "--phases", "examples,coverage,fuzzing",
             "--max-examples", str(MAX_EXAMPLES), "--seed", "15", "--generation-database", "none",
             "--workers", "1", "--request-timeout", "60", "--no-color"],
            capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
            cwd=tmp_path,  # where it keeps its cache (.schemathesis/)
        )
        if run.returncode != 0:
            stack.print_logs()
        assert run.returncode == 0, run.stdout[-12000:] + run.stderr[-2000:]
    finally:
        stack.stop()
