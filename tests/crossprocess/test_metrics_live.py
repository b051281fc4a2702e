"""``/metrics`` on a live uvicorn with two worker processes: scraped over HTTP and parsed with
prometheus_client's own text parser; every process's counts are summed (docs/operations.md#metrics).

Each worker writes its metrics to files of its own in ``PROMETHEUS_MULTIPROC_DIR``; the test
reads those files too, to know that both workers ran turns and that the scrape is their sum.
"""

import asyncio
import contextlib
import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families

from tests.support.frames import chat_request, chunks, is_done, user_message
from tests.support.live import LiveStack, RedisServer, Server, stop_process
from tests.support.waiting import wait_until
from tests.support.wsclient import open_socket, recv_json, recv_until

pytestmark = pytest.mark.crossprocess

TOKEN = "scrape-token"
AGENT = "demo-agent"


@pytest.fixture
def prom_dir(tmp_path: Path) -> Path:
    path = tmp_path / "prometheus"
    path.mkdir()
    return path


@pytest.fixture
def metrics_stack(
    request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer, prom_dir: Path
) -> Iterator[LiveStack]:
    # No address may scrape without the token (the default allows loopback).
    live = LiveStack(
        tmp_path,
        redis.url,
        extra_env={
            "PROMETHEUS_MULTIPROC_DIR": str(prom_dir),
            "AGENT_METRICS_TOKEN": TOKEN,
            "AGENT_METRICS_ALLOWED_IPS": "",
        },
    )
    yield live
    live.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        live.print_logs()


def scrape(server: Server, token: str | None = TOKEN) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, by name and labels."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{server.http}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def per_process(prom_dir: Path, metric: str, labels: dict[str, str]) -> dict[str, float]:
    """The value of one counter sample in each process's file (by pid)."""
    values = {}
    for path in prom_dir.glob("counter_*.db"):
        found = MmapedDict.read_all_values_from_file(str(path))
        pid = path.stem.removeprefix("counter_")
        values[pid] = sum(
            value for key, value, *_ in found if json.loads(key)[1] == metric and json.loads(key)[2] == labels
        )
    return values


@contextlib.contextmanager
def socket_open(server: Server, cookie: str) -> Iterator[None]:
    """One chat socket open on ``server`` (greeted) for the block."""
    loop = asyncio.new_event_loop()

    async def opened() -> Any:
        sock = await open_socket(server.ws, f"/agents/{AGENT}/one-more", cookie)
        assert (await recv_json(sock))["type"] == "cf_agent_identity"
        return sock

    sock = loop.run_until_complete(opened())
    try:
        yield
    finally:
        loop.run_until_complete(sock.close())
        loop.close()


def test_metrics_are_summed_over_two_uvicorn_workers(metrics_stack: LiveStack, prom_dir: Path) -> None:
    metrics_stack.create_user("alice")
    server = metrics_stack.start_server("uvicorn", workers=2)
    cookie = server.login("alice")
    finished = {"agent": AGENT, "outcome": "completed"}
    streamed: list[int] = []

    async def one_round(round_number: int) -> list[Any]:
        """Four conversations, one turn each, on four sockets (each lands on either worker); the sockets stay open."""
        sockets = []
        for i in range(4):
            sock = await open_socket(server.ws, f"/agents/{AGENT}/metrics-{round_number}-{i}", cookie)
            assert (await recv_json(sock))["type"] == "cf_agent_identity"
            assert (await recv_json(sock))["type"] == "cf_agent_mcp_servers"
            sockets.append(sock)
        for i, sock in enumerate(sockets):
            await sock.send(json.dumps(chat_request(f"r{round_number}-{i}", [user_message("u1", f"hello {i}")])))
        for i, sock in enumerate(sockets):
            streamed.append(len(chunks(await recv_until(sock, is_done(f"r{round_number}-{i}"), timeout=30))))
        return sockets

    async def scenario() -> None:
        opened = []
        # Until each worker has run turns (which one accepts a socket is the kernel's choice).
        for round_number in range(10):
            opened += await one_round(round_number)
            counts = per_process(prom_dir, "agents_turns_finished_total", finished)
            if len([n for n in counts.values() if n > 0]) >= 2:
                break
        else:
            raise AssertionError(f"the turns all ran on one worker: {counts}")
        # Gauges of live processes are summed too: every socket is still open.
        samples = scrape(server)
        assert samples[("agents_open_websockets", ())] == len(opened)
        for sock in opened:
            await sock.close()

    asyncio.run(scenario())
    turns = len(streamed)
    samples = scrape(server)

    by_agent = (("agent", AGENT),)
    counts = per_process(prom_dir, "agents_turns_finished_total", finished)
    assert samples[("agents_turns_finished_total", tuple(sorted(finished.items())))] == sum(counts.values()) == turns
    assert samples[("agents_turns_started_total", by_agent)] == turns
    assert samples[("agents_turn_duration_seconds_count", by_agent)] == turns
    assert samples[("agents_turn_first_chunk_seconds_count", by_agent)] == turns
    assert samples[("agents_chunks_streamed_total", by_agent)] == sum(streamed)
    assert samples[("agents_model_requests_total", by_agent)] == turns
    # Tokens as stored with each turn (agents_app.usage), summed over both workers.
    with sqlite3.connect(metrics_stack.database_url.removeprefix("sqlite:///")) as db:
        stored_in, stored_out = db.execute(
            "SELECT SUM(input_tokens), SUM(output_tokens) FROM agents_app_turnusage"
        ).fetchone()
    assert samples[("agents_model_tokens_total", (*by_agent, ("direction", "input")))] == stored_in
    assert samples[("agents_model_tokens_total", (*by_agent, ("direction", "output")))] == stored_out
    # The REST API reports the same usage (the user's own).
    report = server.get_json("/api/usage/?group_by=agent", cookie)
    assert [(g["key"], g["turns"], g["input_tokens"], g["output_tokens"]) for g in report["groups"]] == [
        (AGENT, turns, stored_in, stored_out)
    ]
    # Database facts, read at scrape time: nothing queued, running or waiting.
    assert samples[("agents_oldest_pending_approval_age_seconds", ())] == 0
    assert samples[("agents_ledger_pending_rows", ())] == 0
    assert samples[("agents_schedule_overdue_seconds", ())] == 0
    assert ("agents_turns_queued", by_agent) not in samples
    wait_until(lambda: scrape(server)[("agents_open_websockets", ())] == 0, "every socket counted closed", timeout=10)
    # A worker that is gone no longer counts in the live gauges; its counters stay (totals never drop).
    old_workers = {path.name for path in prom_dir.glob("gauge_livesum_*.db")}
    stop_process(server.proc)
    again = metrics_stack.start_server("uvicorn")
    with socket_open(again, cookie):
        after = scrape(again)
        assert after[("agents_open_websockets", ())] == 1
    assert not old_workers & {path.name for path in prom_dir.glob("gauge_livesum_*.db")}
    assert after[("agents_turns_finished_total", tuple(sorted(finished.items())))] == turns


def test_metrics_need_the_token_or_an_allowed_address(metrics_stack: LiveStack) -> None:
    server = metrics_stack.start_server("uvicorn")
    for token in (None, "wrong"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape(server, token)
        assert refused.value.code == 404
    assert ("agents_open_websockets", ()) in scrape(server)


def test_a_celery_workers_turns_are_summed_in(metrics_stack: LiveStack, prom_dir: Path) -> None:
    """A turn run by a Celery worker (a task, no socket) shows in the server's scrape."""
    alice = metrics_stack.create_user("alice")
    server = metrics_stack.start_server("uvicorn")
    worker = metrics_stack.start_celery_worker()
    from celery import Celery

    Celery(broker=metrics_stack.env["REDIS_URL"]).send_task(
        "agents_app.save_messages", args=[AGENT, "from-celery", ["hello from a task"], alice]
    )
    finished = {"agent": AGENT, "outcome": "completed"}
    key = ("agents_turns_finished_total", tuple(sorted(finished.items())))
    wait_until(lambda: scrape(server).get(key) == 1, "the worker's turn in the scrape", timeout=30)
    ran = {pid: n for pid, n in per_process(prom_dir, "agents_turns_finished_total", finished).items() if n}
    assert ran == {str(worker.pid): 1}
    assert scrape(server)[("agents_model_requests_total", (("agent", AGENT),))] == 1
