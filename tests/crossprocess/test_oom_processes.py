"""Out-of-memory kills with the real kernel OOM killer (docs/architecture.md#out-of-memory).

A process claims a turn the way a server does (``turns.lock.claim_next``, which records its memory
cgroup and OOM-kill count), inside a memory cgroup of its own with a 256 MB limit, then allocates
until the kernel kills it. Another process then finds the dead turn, as the beat sweep does, and
runs its recovery. The control case is the same process ended by a plain ``kill -9``.
"""

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents_app.recovery import memory
from tests.crossprocess.test_recovery_processes import query
from tests.support.live import LiveStack, ScriptProcess, database_url

pytestmark = pytest.mark.crossprocess

LIMIT = 256 * 1024 * 1024

CLAIMANT = r"""
import json, sys
import django
django.setup()
from agents_app import transcript
from agents_app.models import AgentInstance, Turn
from agents_app.turns import lock

json.loads(sys.stdin.readline())  # moved into its cgroup: claim
instance = AgentInstance.objects.create(slug="demo-agent", name="oom")
transcript.save_message(instance, {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
Turn.objects.create(instance=instance, request_id="r-oom", message_ids=["u1"])
claim = lock.claim_next(instance.pk, "specific.oom!x")
print(json.dumps({"claimed": claim.turn.request_id, "watch": claim.turn.memory_watch
                  or Turn.objects.get(pk=claim.turn.pk).memory_watch}), flush=True)
if json.loads(sys.stdin.readline())["then"] == "hog":
    hoard = []
    for _ in range(400):  # up to 4 GB, in pages that are written (bytearray() alone may stay virtual)
        hoard.append(bytearray(b"\x01") * 10_000_000)
    print(json.dumps({"survived": True}), flush=True)
sys.stdin.readline()
"""

# Stays in the claimant's cgroup and reads its count the way a server reads it for each turn it
# claims (``memory.watch``: the counter file opened once, read afresh each time).
WATCHER = r"""
import json, sys
from agents_app.recovery import memory

for line in sys.stdin:
    print(json.dumps({"watch": memory.watch()}), flush=True)
"""

RECOVERER = r"""
import asyncio, json, sys
import django
django.setup()
from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance
from agents_app.recovery import service as recovery
from agents_app import turns

DemoAgent.chat_recovery = json.loads(sys.stdin.readline())["chat_recovery"]

async def main():
    cuts = await recovery.recover_interrupted()
    for cut in cuts:
        await turns.drain(cut.turn.instance_id)
    return [cut.turn.request_id for cut in cuts]

print(json.dumps({"cut": asyncio.run(main())}), flush=True)
"""


@pytest.fixture
def memory_cgroup(tmp_path: Path) -> Iterator[Path]:
    """A fresh memory cgroup under this process's own, limited to ``LIMIT`` with no swap."""
    own = memory.memory_cgroup(Path("/proc/self/cgroup"))
    assert own, "this test needs a readable memory cgroup (cgroup v1 memory controller or v2 memory.events)"
    version, _, path = own.partition(":")
    base = memory.CGROUP_ROOT / "memory" if version == "v1" else memory.CGROUP_ROOT
    group = base / path.lstrip("/") / f"oom-test-{os.getpid()}-{tmp_path.name}"
    group.mkdir()
    try:
        if version == "v1":
            (group / "memory.limit_in_bytes").write_text(str(LIMIT))
            swap = group / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(LIMIT))
        else:
            (group / "memory.max").write_text(str(LIMIT))
            (group / "memory.swap.max").write_text("0")
        yield group
    finally:
        for _ in range(50):  # the kernel frees the group once its last process is reaped
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def claim_in(group: Path, stack: LiveStack, tmp_path: Path) -> tuple[ScriptProcess, dict[str, str]]:
    claimant = ScriptProcess(CLAIMANT, stack.env, tmp_path / "claimant.log")
    (group / "cgroup.procs").write_text(str(claimant.proc.pid))
    claimed = claimant.ask(go=True)
    return claimant, claimed


def recover(stack: LiveStack, tmp_path: Path, chat_recovery: dict[str, int]) -> list[str]:
    recoverer = ScriptProcess(RECOVERER, stack.env, tmp_path / "recoverer.log")
    try:
        return recoverer.ask(chat_recovery=chat_recovery)["cut"]
    finally:
        recoverer.proc.wait(60)


def stack_in(tmp_path: Path, url: str | None = None) -> LiveStack:
    return LiveStack(tmp_path, "redis://127.0.0.1:9/0", url,
                     extra_env={"CHANNEL_LAYER": "memory", "AGENT_LOG_LEVEL": "WARNING"})


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def test_a_turn_whose_process_the_oom_killer_took_is_recovered_as_out_of_memory(
        kind: str, memory_cgroup: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A process the kernel killed for memory is told apart from any other death: the cut says so, the
    incident counts it against ``max_oom_retries``, and with a budget of 0 it is given up at once with the
    reason ``out_of_memory`` rather than re-run into the same kill.
    """
    stack = stack_in(tmp_path, database_url(request, kind, tmp_path, "oom"))
    claimant, claimed = claim_in(memory_cgroup, stack, tmp_path)
    assert claimed["claimed"] == "r-oom" and claimed["watch"].endswith(" 0")
    watcher = ScriptProcess(WATCHER, stack.env, tmp_path / "watcher.log")
    try:
        (memory_cgroup / "cgroup.procs").write_text(str(watcher.proc.pid))
        assert watcher.ask(read=True)["watch"] == claimed["watch"]
        claimant.send(then="hog")
        assert claimant.proc.wait(120) == -signal.SIGKILL
        assert memory.oom_kills(claimed["watch"].rpartition(" ")[0]) == 1  # the kernel's own count
        # A process of the same cgroup that read the count before sees the kill on its next read.
        assert watcher.ask(read=True)["watch"] == claimed["watch"][:-1] + "1"
    finally:
        watcher.kill()  # out of the cgroup, which the fixture then removes
    assert recover(stack, tmp_path, {"max_oom_retries": 0}) == ["r-oom"]
    [(error,)] = query(stack.database_url, "SELECT error FROM agents_app_turn WHERE request_id = 'r-oom'")
    assert error == "Interrupted: the process running this turn was killed for lack of memory"
    [incident] = query(stack.database_url, "SELECT status, reason, oom_attempts, work FROM agents_app_recoveryincident")
    assert incident == ("exhausted", "out_of_memory", 1, 0)


def test_a_plain_kill_minus_nine_is_not_taken_for_an_oom_kill(memory_cgroup: Path, tmp_path: Path) -> None:
    """The same process in the same cgroup, killed by a signal instead: an ordinary interruption, retried."""
    stack = stack_in(tmp_path)
    claimant, claimed = claim_in(memory_cgroup, stack, tmp_path)
    assert claimed["watch"].endswith(" 0")
    claimant.kill()
    assert recover(stack, tmp_path, {"max_oom_retries": 0}) == ["r-oom"]
    [(error,)] = query(stack.database_url, "SELECT error FROM agents_app_turn WHERE request_id = 'r-oom'")
    assert error == "Interrupted: the process running this turn stopped"
    [incident] = query(stack.database_url, "SELECT status, oom_attempts FROM agents_app_recoveryincident")
    assert incident == ("completed", 0)
