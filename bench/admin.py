"""The approvals queue at scale: admin changelist and API list page times and SQL queries, 1k vs 100k rows.

    .venv/bin/python bench/admin.py [--rows 100000] [--runs 7] [--postgres] [--json FILE] [--keep]

It makes a fresh database (an SQLite file in WAL mode in a temporary directory, or with
``--postgres`` a throwaway PostgreSQL cluster from ``tests/support/live.py``), migrates it, and
``bulk_create``s ``PendingApproval`` rows (batches of 5,000) spread over 500 instances of 3 agent
slugs and 50 owners, with 5 actions and every risk level. It then requests pages in this process
with Django's test ``Client`` logged in as an approver (staff with the ``approve_action``
permission, not a superuser, so the permission checks run as they do for a real reviewer), with
the production settings (``thinkproject.settings``), first at 1,000 rows and then at ``--rows``:

* the admin changelist ``/admin/agents_app/pendingapproval/``: first page, page 50 (the last page
  at 1,000 rows), a list filter (``risk=high``) and a search (``q=deploy``);
* the API list ``/api/approvals/``: first page, page 50 (the cursor reached by following ``next``
  49 times, outside the timing; the last page at 1,000 rows), and the filters ``risk=high`` (an
  indexed column) and ``agent=ops-agent`` (a join: the slug is on the instance).

Columns: *median ms* / *min ms* = wall time of the whole request (middleware, session, permission
checks, queries, template or JSON rendering) over ``--runs`` runs after one warm-up; *queries* =
SQL statements of one request (``CaptureQueriesContext``); *rows shown* = rows on the page. The
query count is the figure to compare between 1k and 100k: it must not change; the time may,
where a query scans (the admin's ``COUNT(*)``, its OFFSET, the search's ``LIKE``).
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if not __package__:  # run as a file: import the project, not the bench scripts, as top-level modules
    sys.path[0] = str(ROOT)

BATCH = 5_000
SMALL = 1_000
INSTANCES = 500
OWNERS = 50
SLUGS = ["demo-agent", "ops-agent", "support-agent"]
# (action, summary, risk, permissions): what the demo and a typical ops agent park.
ACTIONS = [
    ("deploy_release", "Deploy a release", "high", ["deploy:run"]),
    ("refund_order", "Refund an order", "medium", ["payments:refund"]),
    ("rotate_keys", "Rotate the API keys", "high", ["secrets:write"]),
    ("send_invoice", "Send an invoice", "low", ["billing:send"]),
    ("archive_project", "Archive a project", "", ["projects:archive"]),
]
ADMIN = "/admin/agents_app/pendingapproval/"
API = "/api/approvals/"
LATER_PAGE = 50
HEADERS = ["rows", "view", "request", "page", "median ms", "min ms", "queries", "rows shown"]


def configure(workdir: Path, database_url: str) -> None:
    """Production settings on the throwaway database; the test Client's host allowed."""
    os.environ.update({
        "DJANGO_SETTINGS_MODULE": "thinkproject.settings",
        "DATABASE_URL": database_url,
        "VAR_DIR": str(workdir),
        "CHANNEL_LAYER": "memory",
        "ALLOWED_HOSTS": "testserver",
        "AGENT_LOG_LEVEL": "WARNING",
        "SECRET_KEY": os.environ.get("SECRET_KEY") or "bench-only-not-a-secret",
    })
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def make_people() -> tuple[Any, list[Any]]:
    """The approver (staff + ``approve_action``) and the instances the rows belong to."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from agents_app.models import AgentInstance

    users = get_user_model().objects
    approver = users.create_user("approver", password="pw", is_staff=True)
    approver.user_permissions.add(
        Permission.objects.get(codename="approve_action", content_type__app_label="agents_app")
    )
    owners = users.bulk_create([users.model(username=f"owner{i}") for i in range(OWNERS)])
    instances = AgentInstance.objects.bulk_create([
        AgentInstance(slug=SLUGS[i % len(SLUGS)], name=f"room-{i}", owner=owners[i % OWNERS]) for i in range(INSTANCES)
    ])
    return approver, instances


def fill(instances: list[Any], start: int, stop: int, rng: random.Random) -> None:
    """Rows ``start``..``stop``, one second apart (oldest first), in ``BATCH``-row ``bulk_create``s.

    Each row is requested by its instance's owner, so the requester column needs its join too.
    """
    from django.db import transaction
    from django.utils import timezone

    from agents_app.models import PendingApproval

    epoch = timezone.now() - timedelta(days=30)
    for first in range(start, stop, BATCH):
        rows = []
        for n in range(first, min(first + BATCH, stop)):
            instance = rng.choice(instances)
            action, summary, risk, permissions = rng.choice(ACTIONS)
            tool_call_id, request_id = f"call_{n}", f"req_{n // 3}"
            payload = {"target": f"item-{n}", "amount": n % 500}
            descriptor = {"requestId": request_id, "toolCallId": tool_call_id, "action": action, "summary": summary,
                          "input": payload, "permissions": permissions, "kind": "durable-pause",
                          **({"risk": risk} if risk else {})}
            rows.append(PendingApproval(
                execution_id=f"actpause_{uuid.UUID(int=rng.getrandbits(128), version=4)}", instance=instance,
                agent=instance.slug, action_name=action, tool_call_id=tool_call_id, request_id=request_id,
                input=payload, descriptor=descriptor, risk=risk, summary=summary,
                requested_by_id=instance.owner_id,
                created_at=epoch + timedelta(seconds=n),
            ))
        with transaction.atomic():
            PendingApproval.objects.bulk_create(rows)


def analyze() -> None:
    """On PostgreSQL, planner statistics as autovacuum has them a minute after a bulk load.

    Not on SQLite: Django never runs ANALYZE there, so a site's SQLite has no statistics (and
    with them SQLite plans the unfiltered first page worse; see bench/README.md).
    """
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def api_page_url(client: Any, page: int) -> tuple[str, int]:
    """The URL of API page ``page`` (or the last one) and its number, by following ``next`` links."""
    url, number = API, 1
    while number < page:
        following = client.get(url).json()["next"]
        if following is None:
            break
        url, number = following, number + 1
    return url, number


def admin_last_page(total: int) -> int:
    from agents_app.approvals.admin import PendingApprovalAdmin

    return min(LATER_PAGE, -(-total // PendingApprovalAdmin.list_per_page))


def rows_shown(response: Any) -> int:
    if response["Content-Type"].startswith("application/json"):
        return len(response.json()["results"])
    return response.content.count(b'name="_selected_action"')


def measure(client: Any, path: str, runs: int) -> tuple[float, float, int, int]:
    """(median ms, min ms, queries of one request, rows on the page) of GET ``path``."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench._stack import median

    response = client.get(path)  # warm-up, and the check that the page is what we mean to time
    if response.status_code != 200:
        raise RuntimeError(f"GET {path} answered {response.status_code}")
    with CaptureQueriesContext(connection) as queries:
        client.get(path)
    count = len(queries)  # now: the next request resets the connection's query log
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - started) * 1000)
    return median(times), min(times), count, rows_shown(response)


def measure_all(client: Any, total: int, runs: int) -> list[list[Any]]:
    admin_page = admin_last_page(total)
    api_url, api_page = api_page_url(client, LATER_PAGE)
    requests = [
        ("admin changelist", "first page", 1, ADMIN),
        ("admin changelist", f"page {admin_page}", admin_page, f"{ADMIN}?p={admin_page}"),
        ("admin changelist", "filter risk=high", 1, f"{ADMIN}?risk__exact=high"),
        ("admin changelist", "search q=deploy", 1, f"{ADMIN}?q=deploy"),
        ("API list", "first page", 1, API),
        ("API list", f"page {api_page} (cursor)", api_page, api_url),
        ("API list", "filter risk=high", 1, f"{API}?risk=high"),
        ("API list", "filter agent=ops-agent", 1, f"{API}?agent=ops-agent"),
    ]
    rows = []
    for view, label, page, path in requests:
        mid, low, queries, shown = measure(client, path, runs)
        rows.append([f"{total:,}", view, label, page, mid, low, queries, shown])
        print(f"  {total:,} rows, {view}, {label}: median {mid:.1f} ms, {queries} queries", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the large table (default 100000)")
    parser.add_argument("--runs", type=int, default=7, help="timed requests per row (default 7)")
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL instead of SQLite")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (SQLite) and print it")
    args = parser.parse_args()
    if not (SMALL < args.rows <= 2_000_000 and 1 <= args.runs <= 100):
        parser.error(f"--rows {SMALL + 1}..2000000, --runs 1..100")

    from bench._stack import machine_load, report
    from tests.support.live import PostgresServer

    workdir = Path(tempfile.mkdtemp(prefix="think-bench-admin-"))
    # The server's own directory: PostgresServer hands it to the "postgres" user.
    pgdir = Path(tempfile.mkdtemp(prefix="think-bench-pg-")) if args.postgres else None
    server = PostgresServer(pgdir) if pgdir is not None else None
    database = "postgres" if server is not None else "sqlite"
    try:
        configure(workdir, server.url if server is not None else f"sqlite:///{workdir / 'admin.sqlite3'}")
        from django.test import Client

        print(f"machine: {machine_load()} (other processes on the machine skew the wall times)", flush=True)
        approver, instances = make_people()
        client = Client()
        client.force_login(approver)
        rng = random.Random(6)
        results: list[list[Any]] = []
        done = 0
        for total in (SMALL, args.rows):
            started = time.perf_counter()
            fill(instances, done, total, rng)
            analyze()
            print(f"{database}: {total:,} rows ({time.perf_counter() - started:.1f} s to load), measuring…", flush=True)
            results += measure_all(client, total, args.runs)
            done = total
        report(f"bench/admin.py on {database}: {args.runs} runs per row, {time.strftime('%Y-%m-%d')}",
               HEADERS, results)
        if args.json:
            args.json.write_text(json.dumps({"database": database, "headers": HEADERS, "rows": results}, indent=1))
    finally:
        from django.db import connections

        connections.close_all()
        if server is not None:
            server.stop()
        if args.keep and server is None:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        if pgdir is not None:
            shutil.rmtree(pgdir, ignore_errors=True)


if __name__ == "__main__":
    main()
