"""Durable chat recovery with real processes: ``kill -9`` of the server process running turns, then of the
Celery worker running their recovery (issue: PostgreSQL, Redis, 2 Daphnes, 1-2 workers, beat).

Twenty conversations are cut at once, each at its own point (before its first chunk, mid-text,
mid-tool-call, mid-action), so one kill is twenty kill points. Every turn must end continued to
completion (one assistant message, no text twice) or sealed with the terminal message; no user
message is lost; no side effect runs twice (the action writes a line per execution).
"""

import asyncio
import json
import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.frames import chat_request, message_text, user_message
from tests.support.live import LiveStack, RedisServer, ScriptProcess, database_url
from tests.support.waiting import wait_until
from tests.support.wsclient import open_socket, recv_json

pytestmark = pytest.mark.crossprocess

PATIENCE = 90.0


def words(count: int) -> str:
    return "".join(f"w{i} " for i in range(count))


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30) as conn:
            return conn.execute(sql).fetchall()
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


def settled(url: str) -> bool:
    """No turn queued or running and no incident being worked on."""
    busy = query(url, "SELECT count(*) FROM agents_app_turn WHERE status IN ('queued', 'running')")[0][0]
    open_incidents = query(url, "SELECT count(*) FROM agents_app_recoveryincident "
                                "WHERE status IN ('detected', 'scheduled', 'attempting')")[0][0]
    return busy == 0 and open_incidents == 0


class Conversation:
    """One chat on the doomed server process, watched from the survivor by an observer socket."""

    def __init__(self, index: int, kind: str, prompt: str) -> None:
        self.index, self.kind, self.prompt = index, kind, prompt
        self.path = f"/agents/crash-agent/c{index}"
        self.deltas = 0
        self.seen: list[dict[str, Any]] = []

    def note(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "cf_agent_use_chat_response" and frame.get("body") and not frame.get("done"):
            chunk = json.loads(frame["body"])
            self.deltas += chunk.get("type") == "text-delta"
            self.seen.append(chunk)


def plan() -> list[Conversation]:
    conversations = [Conversation(i, "before-first-chunk", "/slow 3 6000") for i in range(4)]
    conversations += [Conversation(i, "mid-text", "/slow 250 15") for i in range(4, 12)]
    conversations += [Conversation(i, "mid-tool", '/tool slow_tool {"seconds": 20}') for i in range(12, 16)]
    conversations += [Conversation(i, "mid-action", f'/tool slow_refund {{"order_id": "o{i}", "seconds": 20}}')
                      for i in range(16, 20)]
    return conversations


async def drive(doomed: Any, survivor: Any, cookie: str, conversations: list[Conversation],
                effects: Path) -> dict[int, list[dict[str, Any]]]:
    """Start every conversation, bring each to its kill point, kill -9; what the observers saw."""
    rng = random.Random(11)
    observers = {c.index: await open_socket(survivor.ws, c.path, cookie) for c in conversations}
    senders = {c.index: await open_socket(doomed.ws, c.path, cookie) for c in conversations}

    async def send(c: Conversation, delay: float) -> None:
        await asyncio.sleep(delay)
        await senders[c.index].send(json.dumps(chat_request(f"r{c.index}", [user_message(f"u{c.index}", c.prompt)])))

    # Mid-text replies start at random moments, so the kill finds each at its own word.
    await asyncio.gather(*(send(c, rng.uniform(0, 2) if c.kind == "mid-text" else 0) for c in conversations))

    async def reach(c: Conversation) -> None:
        sock = senders[c.index]
        while True:
            if c.kind == "before-first-chunk" and any(f.get("type") == "start" for f in c.seen):
                return
            if c.kind == "mid-text" and c.deltas >= 3:
                return
            if c.kind == "mid-tool" and any(f.get("type") == "tool-input-available" for f in c.seen):
                return
            if c.kind == "mid-action" and f"o{c.index} " in effects.read_text():
                return
            try:
                c.note(await recv_json(sock, timeout=0.5))
            except TimeoutError:
                continue

    await asyncio.wait_for(asyncio.gather(*(reach(c) for c in conversations)), PATIENCE)
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait(10)

    async def observe(index: int) -> list[dict[str, Any]]:
        frames = []
        while True:
            frame = await recv_json(observers[index], timeout=PATIENCE)
            frames.append(frame)
            if frame.get("type") == "cf_agent_chat_recovering" and not frame["recovering"]:
                return frames

    seen = dict(zip(observers, await asyncio.gather(*(observe(i) for i in observers)), strict=True))
    for sock in observers.values():
        await sock.close()
    return seen


def assert_recovered(survivor: Any, cookie: str, conversations: list[Conversation], effects: Path) -> Counter[str]:
    """Each conversation ended continued (one reply, no repeated text) or sealed; counts of endings."""
    endings: Counter[str] = Counter()
    executions = Counter(line.split()[0] for line in effects.read_text().splitlines())
    for c in conversations:
        history = survivor.get_json(f"{c.path}/get-messages", cookie)
        assert [m["role"] for m in history] == ["user", "assistant"], (c.kind, history)
        assert history[0]["parts"][0]["text"] == c.prompt  # no user message lost
        reply = history[1]
        text = message_text(reply)
        tools = [p for p in reply["parts"] if p.get("toolCallId")]
        assert all(p["state"] not in ("input-streaming", "input-available") for p in tools), tools
        if c.kind in ("before-first-chunk", "mid-text"):
            assert text == words(int(c.prompt.split()[1])), (c.kind, text)
        if c.kind == "mid-action":
            assert executions[f"o{c.index}"] == 1  # never run again
        endings[c.kind] += 1
    return endings


@pytest.fixture
def crash_stack(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Any:
    url = database_url(request, "postgres", tmp_path, "recovery")
    effects = tmp_path / "effects.txt"
    effects.touch()
    stack = LiveStack(tmp_path, redis.url, url, extra_env={
        "DJANGO_SETTINGS_MODULE": "tests.support.settings_live", "AGENT_RECOVERY_SWEEP_SECONDS": "1",
        "CRASH_EFFECTS": str(effects), "AGENT_LOG_LEVEL": "WARNING",
    })
    stack.create_user("alice")
    yield stack, url, effects
    stack.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        stack.print_logs()


@pytest.mark.requires_postgres
def test_kill_minus_nine_of_the_daphne_running_twenty_turns(crash_stack: Any) -> None:
    stack, url, effects = crash_stack
    doomed, survivor = stack.start_server(), stack.start_server()
    stack.start_celery_worker("a")
    stack.start_celery_beat()
    cookie = survivor.login("alice")
    conversations = plan()
    started = time.monotonic()
    seen = asyncio.run(drive(doomed, survivor, cookie, conversations, effects))
    wait_until(lambda: settled(url), "every recovery to end", timeout=PATIENCE)
    print(f"20 turns cut and recovered in {time.monotonic() - started:.1f} s")
    # Every observer, on the other process, saw the recovery start and end.
    for index, frames in seen.items():
        assert {"type": "cf_agent_chat_recovering", "recovering": True, "id": f"r{index}"} in frames
    endings = assert_recovered(survivor, cookie, conversations, effects)
    assert endings == {"before-first-chunk": 4, "mid-text": 8, "mid-tool": 4, "mid-action": 4}
    incidents = query(url, "SELECT status, kind FROM agents_app_recoveryincident")
    assert Counter(status for status, _ in incidents) == {"completed": 20}
    # A turn cut before its first word is run again; one with a partial reply goes on with it
    # (the calls of the tool and action turns were stored before they ran). A reply cut within
    # its first ten chunks has nothing stored yet (rows of ten) and is run again too.
    kinds = Counter(kind for _, kind in incidents)
    assert kinds["retry"] >= 4 and kinds["continue"] >= 8, kinds
    print("content chunks stored at the kill:", sorted(w for (w,) in query(
        url, "SELECT work FROM agents_app_recoveryincident")))
    # The attempts ran on the Celery worker, not on the surviving Daphne.
    workers = {w for (w,) in query(url, "SELECT worker FROM agents_app_turn WHERE kind = 'recovery'")}
    assert all("specific." in w for w in workers)
    assert len({w.split(" ")[0] for w in workers}) == 1


@pytest.mark.requires_postgres
def test_kill_minus_nine_of_the_worker_running_twenty_continuations(crash_stack: Any) -> None:
    stack, url, effects = crash_stack
    doomed, survivor = stack.start_server(), stack.start_server()
    worker_a = stack.start_celery_worker("a")
    stack.start_celery_beat()
    cookie = survivor.login("alice")
    conversations = [Conversation(i, "mid-text", "/slow 250 40") for i in range(20)]

    async def scenario() -> None:
        rng = random.Random(7)
        # Observers connect first: a socket that connects mid-stream gets nothing live until it ACKs.
        observers = {c.index: await open_socket(survivor.ws, c.path, cookie) for c in conversations}
        senders = {c.index: await open_socket(doomed.ws, c.path, cookie) for c in conversations}
        for c in conversations:
            await senders[c.index].send(json.dumps(chat_request(f"r{c.index}",
                                                                [user_message(f"u{c.index}", c.prompt)])))

        async def until_deltas(c: Conversation, sock: Any, count: int) -> None:
            while c.deltas < count:
                c.note(await recv_json(sock, timeout=PATIENCE))

        await asyncio.gather(*(until_deltas(c, senders[c.index], rng.randint(3, 30)) for c in conversations))
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
        # Worker A runs the twenty continuations; kill it when each has streamed a little more.
        async def continuation_deltas(c: Conversation, count: int) -> None:
            sock = observers[c.index]
            while not (await recv_json(sock, timeout=PATIENCE)).get("done"):
                pass  # the cut request's frames, up to its end (outcome "recovering")
            c.deltas = 0
            await until_deltas(c, sock, count)

        await asyncio.gather(*(continuation_deltas(c, rng.randint(1, 30)) for c in conversations))
        worker_a.send_signal(signal.SIGKILL)
        worker_a.wait(10)
        for sock in (*senders.values(), *observers.values()):
            await sock.close()

    asyncio.run(scenario())
    stack.start_celery_worker("b")  # its start-up sweep finds worker A's attempts cut
    wait_until(lambda: settled(url), "every recovery to end on worker B", timeout=PATIENCE)
    assert_recovered(survivor, cookie, conversations, effects)
    incidents = query(url, "SELECT status, attempts_total FROM agents_app_recoveryincident")
    assert [status for status, _ in incidents] == ["completed"] * 20
    assert all(total == 2 for _, total in incidents)  # cut on the server process, then on worker A


CLAIMER = r"""
import asyncio, json, sys, time
import django
django.setup()
from agents_app.recovery import service as recovery

line = sys.stdin.readline()
time.sleep(max(0, json.loads(line)["at"] - time.time()))
won = asyncio.run(recovery.recover_interrupted())
print(json.dumps({"won": [cut.turn.request_id for cut in won]}), flush=True)
"""

DEAD_TURNS = r"""
import os, socket
import django
django.setup()
from django.utils import timezone
from agents_app import transcript
from agents_app.models import AgentInstance, Turn
dead = f"{socket.gethostname()}:{2**22 + os.getpid()} x"
for i in range(30):
    instance = AgentInstance.objects.create(slug="demo-agent", name=f"race-{i}")
    transcript.save_message(instance, {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
    Turn.objects.create(instance=instance, request_id=f"r{i}", status="running", started_at=timezone.now(),
                        message_ids=["u1"], worker=dead)
"""


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def test_exactly_one_process_claims_each_cut_turn(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = database_url(request, kind, tmp_path, "claims")
    stack = LiveStack(tmp_path, "redis://127.0.0.1:9/0", url,
                      extra_env={"CHANNEL_LAYER": "memory", "AGENT_LOG_LEVEL": "WARNING"})
    stack.manage("shell", "-c", DEAD_TURNS)
    claimers = [ScriptProcess(CLAIMER, stack.env, tmp_path / f"claimer-{i}.log") for i in range(4)]
    at = time.time() + 3
    for claimer in claimers:
        claimer.send(at=at)
    won = [request_id for claimer in claimers for request_id in claimer.receive(timeout=PATIENCE)["won"]]
    for claimer in claimers:
        claimer.stop()
    assert sorted(won) == sorted(f"r{i}" for i in range(30))  # each once, by exactly one process
    attempts = query(url, "SELECT count(*) FROM agents_app_turn WHERE kind = 'recovery'")[0][0]
    incidents = query(url, "SELECT count(*), sum(attempts_total) FROM agents_app_recoveryincident")[0]
    assert (attempts, *incidents) == (30, 30, 30)
    assert query(url, "SELECT count(*) FROM agents_app_turn WHERE kind = 'recovery' AND status = 'queued'")[0][0] == 30
