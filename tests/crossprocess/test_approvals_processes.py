"""Durable-pause approvals across processes: one winner per call, continuations with nobody connected.

The deciders are separate Python processes (``django.setup()`` with the production settings, on
a database migrated by ``manage.py migrate``), each answering the JSON commands the test writes
on its stdin: park a call through a real turn, approve it N times at a given wall-clock instant,
report the rows. ``ActionTestAgent`` joins the production agents in those processes, so its
``pauseAction`` counts its executions there (``PROBES``).

* The race (claim by delete, docs/architecture.md#durable-pause): 50 approves of one parked call
  from 4 processes on PostgreSQL and from 2 on SQLite; exactly one runs the action.
* The connection-less continuation: approved from a process nobody is connected to, the
  model's reaction is run by a real Celery worker.
* A call parked through one server process survives a ``kill -9`` of that server and is approved
  through the restarted one.
"""

import asyncio
import json
import os
import signal
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.frames import chat_request, is_done, user_message
from tests.support.live import LiveStack, ScriptProcess, Server, database_url
from tests.support.waiting import wait_until
from tests.support.wsclient import open_socket, recv_json, recv_until

pytestmark = pytest.mark.crossprocess

DEPLOY = '/tool deploy_release {"version": "1.4.2"}'
DEPLOYED = "Deployed 1.4.2 to production."
CONTINUED = DEPLOYED
APPROVERS = 50
ROUNDS = 8
# Seconds within which a continuation queued for Celery has run.
CONTINUATION_DEADLINE = 10.0

# The decider: a command per stdin line, an answer per stdout line (JSON).
WORKER = r"""
import asyncio, json, os, sys, time

import django
django.setup()

from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings

# The test agent joins the production agents; the continuation runs where the test says.
override_settings(
    AGENT_CLASSES=[*settings.AGENT_CLASSES, "tests.action_agents.ActionTestAgent"],
    AGENT_APPROVAL_CONTINUATION=os.environ["APPROVAL_CONTINUATION"],
).enable()

from agents_app import registry, transcript
from agents_app.approvals import service as approvals
from agents_app.models import AgentInstance, ApprovalDecision, LedgerEntry, PendingApproval, Turn
from tests.action_agents import PROBES


def say(**message):
    print(json.dumps(message), flush=True)


async def agent_of(cmd):
    owner, _ = await get_user_model().objects.aget_or_create(username="alice")
    return await registry.get_agent_class(cmd["slug"]).aget(cmd["name"], owner=owner)


async def park(cmd):
    agent = await agent_of(cmd)
    before = {p["executionId"] for p in await agent.pending_approvals()}
    result = await agent.save_messages([cmd["park"]])
    parked = [p for p in await agent.pending_approvals() if p["executionId"] not in before]
    return {"status": result.status, "parked": parked}


async def approve(cmd):
    PROBES.clear()
    delay = cmd.get("at", 0) - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    calls = [approvals.approve_execution(cmd["approve"]) for _ in range(cmd.get("times", 1))]
    results = await asyncio.gather(*calls)
    return {"results": results, "executions": sum(p.pause_count for p in PROBES.values())}


@database_sync_to_async
def state(cmd):
    instance = AgentInstance.objects.filter(slug=cmd["slug"], name=cmd["name"]).first()
    # The transcript before the rows: a turn's reply and its end commit together, so rows read
    # after a transcript that holds the reply show that turn ended (read the other way round, a
    # commit between the two reads showed the reply beside a turn still running).
    messages = transcript.load(instance) if instance is not None else []
    return {
        "pending": list(PendingApproval.objects.values_list("pk", flat=True)),
        "decisions": [list(d) for d in ApprovalDecision.objects.order_by("pk").values_list("execution_id", "decision")],
        "ledger": [list(e) for e in LedgerEntry.objects.order_by("key").values_list("key", "status")],
        "turns": [list(t) for t in Turn.objects.filter(instance=instance).order_by("pk").values_list(
            "kind", "status", "worker")],
        "messages": messages,
    }


async def main():
    say(ready=os.getpid())
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        cmd = json.loads(line)
        if "park" in cmd:
            say(**await park(cmd))
        elif "approve" in cmd:
            say(**await approve(cmd))
        else:
            say(**await state(cmd))


asyncio.run(main())
"""


class Decider(ScriptProcess):
    """One decider process (a ``ScriptProcess`` running ``WORKER``)."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__(WORKER, env, log)


@pytest.fixture
def deciders(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[LiveStack, int], list[Decider]]]:
    """Starts deciders on a stack's database (ready when returned); all are stopped at the end."""
    started: list[Decider] = []

    def start(stack: LiveStack, count: int) -> list[Decider]:
        env = {"APPROVAL_CONTINUATION": "celery", **stack.env}
        new = [Decider(env, tmp_path / f"decider-{len(started) + i}.log") for i in range(count)]
        started.extend(new)
        for decider in new:
            assert "ready" in decider.receive()
        return new

    yield start
    for decider in started:
        decider.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for log in sorted(tmp_path.glob("decider-*.log")):
            print(f"----- {log.name}", log.read_text(errors="replace")[-3000:], sep="\n")


def not_pending(execution_id: str) -> dict[str, Any]:
    return {"status": "error", "executionId": execution_id,
            "error": f'Execution "{execution_id}" is no longer pending — it was approved or rejected elsewhere.'}


def last_text(messages: list[dict[str, Any]]) -> str:
    return [p["text"] for p in messages[-1]["parts"] if p["type"] == "text"][-1]


# ------------------------------------------------------------------------------------- the race
@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def race_stack(request: pytest.FixtureRequest, tmp_path: Path) -> LiveStack:
    """A migrated database with no Redis: continuations run inline in the winning process."""
    database = database_url(request, request.param, tmp_path, "approvals")
    # A Redis URL is required by LiveStack's environment, but nothing here connects to it.
    return LiveStack(tmp_path, "redis://127.0.0.1:9/0", database,
                     extra_env={"CHANNEL_LAYER": "memory", "APPROVAL_CONTINUATION": "inline",
                                "AGENT_LOG_LEVEL": "WARNING"})


def assert_one_winner_per_call(deciders: list[Decider]) -> None:
    """ROUNDS calls parked in one conversation, each approved APPROVERS times at once by all deciders."""
    room = {"slug": "action-test-agent", "name": "race"}
    per_decider = [APPROVERS // len(deciders) + (i < APPROVERS % len(deciders)) for i in range(len(deciders))]
    executed: list[str] = []
    for i in range(ROUNDS):
        parked = deciders[0].ask(park=f'/tool pauseAction {{"message": "race {i}"}}', **room)
        [entry] = parked["parked"]
        execution_id = entry["executionId"]
        at = time.time() + 0.2
        for decider, times in zip(deciders, per_decider, strict=True):
            decider.send(approve=execution_id, times=times, at=at)
        answers = [decider.receive() for decider in deciders]
        results = [result for answer in answers for result in answer["results"]]
        assert len(results) == APPROVERS
        assert sum(answer["executions"] for answer in answers) == 1
        won = [r for r in results if r != not_pending(execution_id)]
        assert won == [f"paused-exec: race {i}"]
        executed.append(execution_id)
    final = deciders[-1].ask(**room)
    assert final["pending"] == []
    assert final["decisions"] == [[execution_id, "approved"] for execution_id in executed]
    assert [status for _, status in final["ledger"]] == ["settled"] * ROUNDS
    # Each winner ran the continuation: the model read each outcome.
    assert last_text(final["messages"]) == f"paused-exec: race {ROUNDS - 1}."


@pytest.mark.requires_postgres
@pytest.mark.parametrize("race_stack", ["postgres"], indirect=True)
def test_fifty_approves_from_four_processes_on_postgres_run_the_call_once(race_stack, deciders):
    assert_one_winner_per_call(deciders(race_stack, 4))


@pytest.mark.parametrize("race_stack", ["sqlite"], indirect=True)
def test_fifty_approves_from_two_processes_on_sqlite_run_the_call_once(race_stack, deciders):
    assert_one_winner_per_call(deciders(race_stack, 2))


# ------------------------------------------------------------------ continuations with no connection
def test_an_approval_from_another_process_continues_in_a_celery_worker(stack, deciders):
    worker = stack.start_celery_worker()
    parker, approver = deciders(stack, 2)
    room = {"slug": "demo-agent", "name": "deploy-room"}
    parked = parker.ask(park=DEPLOY, **room)
    assert parked["status"] == "completed"
    [entry] = parked["parked"]

    # Nobody is connected; the approving process returns once the action ran.
    assert approver.ask(approve=entry["executionId"])["results"] == [DEPLOYED]

    def continued() -> dict[str, Any] | None:
        state = parker.ask(**room)
        return state if last_text(state["messages"]) == CONTINUED else None

    state = wait_until(continued, "the continuation turn", timeout=CONTINUATION_DEADLINE, interval=0.1)
    part = next(p for p in state["messages"][-1]["parts"] if p.get("toolCallId") == entry["descriptor"]["toolCallId"])
    assert part["output"] == DEPLOYED
    assert state["pending"] == []
    assert state["decisions"] == [[entry["executionId"], "approved"]]
    [(first_kind, _, _), (kind, status, ran_by)] = state["turns"]
    assert (first_kind, kind, status) == ("programmatic", "continuation", "completed")
    # The worker's id is "<host>:<pid> <control channel>": the Celery worker ran it.
    assert ran_by.split()[0].endswith(f":{worker.pid}")


# ----------------------------------------------- a parked call survives a kill -9 of its server
def post_json(daphne: Server, path: str, cookie: str, body: dict[str, Any] | None = None) -> Any:
    """POST as the logged-in browser would (session cookie and CSRF token)."""
    csrf = dict(c.split("=", 1) for c in cookie.split("; "))["csrftoken"]
    request = urllib.request.Request(
        f"{daphne.http}{path}", data=json.dumps(body or {}).encode(), method="POST",
        headers={"Cookie": cookie, "X-CSRFToken": csrf, "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.loads(response.read())


def test_a_parked_call_survives_a_kill_of_its_server_and_is_approved_after_the_restart(stack):
    stack.create_user("alice", staff=True)
    daphne = stack.start_server()
    cookie = daphne.login("alice")
    path = "/agents/demo-agent/deploys"

    async def park_over_websocket() -> None:
        sock = await open_socket(daphne.ws, path, cookie)
        assert (await recv_json(sock))["type"] == "cf_agent_identity"
        await sock.send(json.dumps(chat_request("r1", [user_message("u1", DEPLOY)])))
        await recv_until(sock, is_done("r1"))
        await sock.close()

    asyncio.run(park_over_websocket())
    [before] = daphne.get_json("/api/approvals/", cookie)["results"]
    assert before["execution_id"].startswith("actpause_")
    assert (before["action"], before["summary"], before["risk"], before["permissions"]) == (
        "deploy_release", "Deploy a release", "high", ["deploy:run"])

    os.killpg(daphne.proc.pid, signal.SIGKILL)
    daphne.proc.wait(10)
    restarted = stack.start_server()
    stack.start_celery_worker()
    [after] = restarted.get_json("/api/approvals/", cookie)["results"]
    assert after == before

    decided = post_json(restarted, f"/api/approvals/{before['execution_id']}/approve/", cookie)
    assert decided == {"execution_id": before["execution_id"], "status": "approved", "result": DEPLOYED}

    def transcript() -> list[dict[str, Any]] | None:
        messages = restarted.get_json("/api/agents/demo-agent/deploys/messages/", cookie)
        return messages if last_text(messages) == CONTINUED else None

    messages = wait_until(transcript, "the continuation after the restart", timeout=CONTINUATION_DEADLINE, interval=0.1)
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert restarted.get_json("/api/approvals/", cookie)["results"] == []
