"""The action idempotency ledger on the real database (docs/architecture.md#ledger).

The reference tests drive the ledger through a chat turn; here the same cases call
``ledger.run_once`` directly, as the action pipeline will. Ages come from ``now=``; no test sleeps.
"""

import asyncio
import dataclasses
import enum
import logging
import math
import re
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from agents_app import events, tasks
from agents_app.actions import ledger
from agents_app.models import LedgerEntry
from tests.support.events import names

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGE = {"message": "hello"}
HASH = ledger.input_hash(MESSAGE)
LEASE = timedelta(milliseconds=50)
PENDING_MESSAGE = (
    "A prior attempt of this action is in an unknown state; not re-executed. Manual reconciliation may be required."
)


# --------------------------------------------------------------------------------------- helpers
class Echo:
    """The echo action of the reference's tests: counts executions; ``fail``/``gate``/``output`` shape a run."""

    def __init__(self, *, fail: str | None = None, output: Any = None) -> None:
        self.count = 0
        self.fail = fail
        self.output = output
        self.started = asyncio.Event()
        self.gate: asyncio.Event | None = None

    async def __call__(self, message: str = "hello") -> Any:
        self.count += 1
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise RuntimeError(self.fail)
        return self.output if self.output is not None else f"action echo: {message}"


async def call(echo: Echo, key: str | None, *, message: str = "hello", action: str = "echo",
               retryable: bool = True, lease: Any = LEASE, now: Any = None,
               tool_call_id: str = "tc1") -> ledger.LedgerResult:
    return await ledger.run_once(
        key, action_name=action, input_hash=ledger.input_hash({"message": message}), request_id="req-1",
        tool_call_id=tool_call_id, retryable=retryable, lease=lease, now=now,
        execute=lambda: echo(message),
    )


@database_sync_to_async
def rows() -> list[dict[str, Any]]:
    return list(LedgerEntry.objects.order_by("key").values("key", "action_name", "status", "updated_at",
                                                            "request_id", "tool_call_id", "result_json"))


@database_sync_to_async
def seed(key: str, *, status: str = LedgerEntry.Status.PENDING, age: timedelta = timedelta(0),
         action: str = "echo", input_hash: str = HASH, result_json: str = "") -> Any:
    """A row as a crashed (pending) or earlier (settled) attempt left it; returns its ``updated_at``."""
    at = timezone.now() - age
    LedgerEntry.objects.create(key=key, action_name=action, input_hash=input_hash, status=status,
                               result_json=result_json, created_at=at, updated_at=at)
    return at


# --------------------------------------------------------------------------------------- keys, hashes
def test_ledger_key_prefers_the_explicit_key_then_the_tool_call():
    assert ledger.ledger_key("echo", "replay-key", "tc1") == "action:echo:replay-key"
    assert ledger.ledger_key("echo", None, "tc1") == "tool:tc1"
    assert ledger.ledger_key("echo", None, None) is None
    assert ledger.ledger_key("echo", None, "") is None


def test_an_empty_explicit_key_is_an_error_not_a_fallback():
    message = 'Action "echo" returned an empty idempotency key'
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        ledger.ledger_key("echo", "", "tc1")


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_input_hash_is_canonical():
    h = ledger.input_hash
    assert h({"b": 1, "a": {"d": [1, 2], "c": None}}) == h({"a": {"c": None, "d": [1, 2]}, "b": 1})
    assert h({"message": "hello"}) != h({"message": "different"})
    assert h([1, 2]) != h([2, 1])
    assert h((1, 2)) == h([1, 2])
    assert h(1.0) == h(1) and h(1.5) != h(1)
    assert h({1: "x"}) == h({"1": "x"})
    assert h(True) != h(1) and h(None) != h("None")
    assert len(h("x")) == 64 and int(h("x"), 16) >= 0


def test_input_hash_takes_ints_of_any_size():
    huge = 10**5000  # beyond int → str's digit limit
    assert ledger.input_hash(huge) == ledger.input_hash(huge)
    assert ledger.input_hash(huge) != ledger.input_hash(huge + 1)
    assert ledger.input_hash(2**63) != ledger.input_hash(str(2**63))


def test_input_hash_of_non_json_values_is_stable():
    h = ledger.input_hash
    assert h({3, 1, 2}) == h({1, 2, 3})
    assert h(b"\x01") == h(bytearray(b"\x01")) != h("01")
    assert h(Point(1, 2)) == h(Point(1, 2)) != h(Point(2, 1))
    assert h(Colour.RED) == h(Colour.RED) != h("red")
    assert h(timezone.now().replace(year=2020)) != h(timezone.now().replace(year=2021))
    assert h(math.nan) == h(math.nan)
    cycle: list[Any] = [1]
    cycle.append(cycle)
    assert h(cycle) == h([1, "[Circular]"])


def test_error_messages_are_the_spec_strings():
    assert ledger.conflict_message("action:echo:conflict-key", "echo") == (
        'Idempotency key "action:echo:conflict-key" for action "echo" was reused with different input. '
        "This is a programming error; do not retry."
    )


# --------------------------------------------------------- claim, replay, conflict, reclaim, release
async def test_records_and_replays_settled_rows(emitted):
    echo = Echo()
    first = await call(echo, "action:echo:replay-key")
    assert (first.outcome, first.value, first.executed, first.recorded) == ("claimed", "action echo: hello", True, True)
    [row] = await rows()
    assert (row["key"], row["action_name"], row["status"]) == ("action:echo:replay-key", "echo", "settled")
    assert (row["request_id"], row["tool_call_id"]) == ("req-1", "tc1")

    second = await call(echo, "action:echo:replay-key")
    assert (second.outcome, second.value, second.executed, second.recorded) == ("replayed", "action echo: hello",
                                                                                 False, True)
    assert echo.count == 1
    about = {"action": "echo", "key": "action:echo:replay-key", "inputHash": HASH}
    assert emitted == [(events.LEDGER_SETTLED, about), (events.LEDGER_REPLAYED, about)]


async def test_reused_key_with_different_input_is_a_conflict(emitted):
    echo = Echo()
    await call(echo, "action:echo:conflict-key")
    result = await call(echo, "action:echo:conflict-key", message="different")
    assert result.outcome == "conflict" and not result.executed and result.value is None
    assert result.error_name == "ActionKeyConflict"
    assert result.error_message == (
        'Idempotency key "action:echo:conflict-key" for action "echo" was reused with different input. '
        "This is a programming error; do not retry."
    )
    assert echo.count == 1
    assert emitted[-1] == (events.LEDGER_CONFLICT, {"action": "echo", "key": "action:echo:conflict-key",
                                                    "inputHash": ledger.input_hash({"message": "different"})})


async def test_reused_key_by_another_action_is_a_conflict():
    echo = Echo()
    await call(echo, "tool:tc1")
    result = await call(echo, "tool:tc1", action="other")
    assert result.outcome == "conflict" and echo.count == 1


async def test_conflict_is_checked_before_the_pending_status():
    await seed("action:echo:k", input_hash=ledger.input_hash({"message": "before"}))
    echo = Echo()
    assert (await call(echo, "action:echo:k")).outcome == "conflict"
    assert echo.count == 0


async def test_a_fresh_pending_row_blocks_execution(emitted):
    await seed("action:echo:pending-key")
    echo = Echo()
    result = await call(echo, "action:echo:pending-key")
    assert (result.outcome, result.executed, result.error_name) == ("pending", False, "ActionPendingError")
    assert result.error_message == PENDING_MESSAGE
    assert echo.count == 0
    assert names(emitted) == [events.LEDGER_PENDING]
    assert [r["status"] for r in await rows()] == ["pending"]


async def test_reclaims_a_stale_explicit_key_pending_row_and_settles_it(emitted):
    seeded = await seed("action:echo:stale-key")
    echo = Echo()
    result = await call(echo, "action:echo:stale-key", now=seeded + timedelta(seconds=1))
    assert (result.outcome, result.value, result.executed, result.age_ms) == ("reclaimed", "action echo: hello",
                                                                              True, 1000)
    assert echo.count == 1
    [row] = await rows()
    assert row["status"] == "settled" and row["updated_at"] > seeded
    assert emitted[0] == (events.LEDGER_RECLAIMED, {"action": "echo", "key": "action:echo:stale-key",
                                                    "inputHash": HASH, "ageMs": 1000})
    assert names(emitted) == [events.LEDGER_RECLAIMED, events.LEDGER_SETTLED]


async def test_a_row_exactly_as_old_as_the_lease_is_not_stale():
    seeded = await seed("action:echo:edge")
    echo = Echo()
    assert (await call(echo, "action:echo:edge", now=seeded + LEASE)).outcome == "pending"
    assert (await call(echo, "action:echo:edge", now=seeded + LEASE + timedelta(microseconds=1))).outcome == "reclaimed"
    assert echo.count == 1


async def test_does_not_reclaim_a_stale_fallback_key_row():
    seeded = await seed("tool:tc-direct")
    echo = Echo()
    result = await call(echo, "tool:tc-direct", retryable=False, now=seeded + timedelta(seconds=1))
    assert result.outcome == "pending" and echo.count == 0


async def test_does_not_reclaim_when_the_lease_is_disabled():
    seeded = await seed("action:echo:no-lease")
    echo = Echo()
    result = await call(echo, "action:echo:no-lease", lease=None, now=seeded + timedelta(days=365))
    assert result.outcome == "pending" and echo.count == 0


async def test_the_lease_defaults_to_the_setting():
    seeded = await seed("action:echo:setting")
    echo = Echo()
    later = seeded + timedelta(minutes=5, seconds=1)
    with override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=None):
        assert (await call(echo, "action:echo:setting", lease=ledger.USE_SETTING, now=later)).outcome == "pending"
    assert timedelta(minutes=5) == ledger.DEFAULT_PENDING_RETRY_LEASE
    assert (await call(echo, "action:echo:setting", lease=ledger.USE_SETTING, now=later)).outcome == "reclaimed"


async def test_releases_the_row_when_a_reclaimed_execution_throws():
    seeded = await seed("action:echo:reclaim-fail")
    echo = Echo(fail="ledger action failed")
    with pytest.raises(RuntimeError, match="ledger action failed"):
        await call(echo, "action:echo:reclaim-fail", now=seeded + timedelta(seconds=1))
    assert echo.count == 1
    assert await rows() == []
    with pytest.raises(RuntimeError, match="ledger action failed"):
        await call(echo, "action:echo:reclaim-fail")
    assert echo.count == 2
    assert await rows() == []


async def test_a_stale_reclaim_racing_itself_in_one_loop_executes_once():
    seeded = await seed("action:echo:stale-race")
    echo = Echo()
    echo.gate = asyncio.Event()
    later = seeded + timedelta(seconds=1)
    first = asyncio.create_task(call(echo, "action:echo:stale-race", now=later))
    await echo.started.wait()
    second = asyncio.create_task(call(echo, "action:echo:stale-race", now=later))
    await asyncio.sleep(0)
    echo.gate.set()
    a, b = await asyncio.gather(first, second)
    assert a.value == b.value == "action echo: hello"
    assert (a.outcome, a.executed, b.executed, b.coalesced) == ("reclaimed", True, False, True)
    assert echo.count == 1
    assert [r["status"] for r in await rows()] == ["settled"]


async def test_releases_keys_after_execution_failure():
    echo = Echo(fail="action failed")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="action failed"):
            await call(echo, "action:echo:fail-key")
    assert echo.count == 2
    assert await rows() == []


async def test_coalesces_same_loop_duplicate_executions(emitted):
    echo = Echo()
    echo.gate = asyncio.Event()
    first = asyncio.create_task(call(echo, "action:echo:dup"))
    await echo.started.wait()
    second = asyncio.create_task(call(echo, "action:echo:dup"))
    await asyncio.sleep(0)
    echo.gate.set()
    a, b = await asyncio.gather(first, second)
    assert a.value == b.value == "action echo: hello"
    assert (a.executed, a.coalesced, b.executed, b.coalesced) == (True, False, False, True)
    assert echo.count == 1
    assert [(r["key"], r["status"]) for r in await rows()] == [("action:echo:dup", "settled")]
    assert names(emitted) == [events.LEDGER_SETTLED]


async def test_a_follower_of_a_failing_call_gets_its_error():
    echo = Echo(fail="boom")
    echo.gate = asyncio.Event()
    first = asyncio.create_task(call(echo, "action:echo:dup-fail"))
    await echo.started.wait()
    second = asyncio.create_task(call(echo, "action:echo:dup-fail"))
    await asyncio.sleep(0)
    echo.gate.set()
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert [str(r) for r in results] == ["boom", "boom"]
    assert echo.count == 1
    assert await rows() == []


async def test_a_follower_of_a_cancelled_call_runs_it_itself():
    echo = Echo()
    echo.gate = asyncio.Event()
    first = asyncio.create_task(call(echo, "action:echo:dup-cancel"))
    await echo.started.wait()
    second = asyncio.create_task(call(echo, "action:echo:dup-cancel"))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    echo.gate.set()
    result = await second
    assert (result.outcome, result.executed, result.value) == ("claimed", True, "action echo: hello")
    assert echo.count == 2
    assert [r["status"] for r in await rows()] == ["settled"]


async def test_a_cancelled_execution_releases_its_row():
    echo = Echo()
    echo.gate = asyncio.Event()
    task = asyncio.create_task(call(echo, "action:echo:timeout"))
    await echo.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await rows() == []


async def test_a_call_cancelled_while_claiming_leaves_no_row():
    echo = Echo()
    task = asyncio.create_task(call(echo, "action:echo:cancel-claim"))
    await asyncio.sleep(0)  # the task is now waiting for claim() in its thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert echo.count == 0
    assert await rows() == []


async def test_releases_the_row_when_the_result_cannot_be_serialized(emitted):
    symbol = object()
    echo = Echo(output=symbol)
    result = await call(echo, "action:echo:symbol")
    assert result.value is symbol
    assert (result.outcome, result.executed, result.recorded) == ("claimed", True, False)
    assert echo.count == 1
    assert await rows() == []
    assert emitted == [(events.LEDGER_SERIALIZE_FAILED, {"action": "echo", "key": "action:echo:symbol"})]


async def test_nan_is_not_stored_as_json():
    echo = Echo(output={"ratio": math.nan})
    result = await call(echo, "action:echo:nan")
    assert not result.recorded and math.isnan(result.value["ratio"])
    assert await rows() == []


async def test_the_returned_value_is_the_json_round_trip():
    echo = Echo(output={"pair": (1, 2), 3: "three", "big": 2**70})
    result = await call(echo, "action:echo:shape")
    assert result.value == {"pair": [1, 2], "3": "three", "big": 2**70}
    assert (await call(echo, "action:echo:shape")).value == result.value


async def test_a_none_result_is_stored_as_absent_and_replayed_as_none():
    async def nothing() -> None:
        return None

    kwargs = {"action_name": "echo", "input_hash": HASH, "retryable": True, "lease": LEASE, "execute": nothing}
    assert (await ledger.run_once("action:echo:none", **kwargs)).recorded
    [row] = await rows()
    assert row["result_json"] == '{"valuePresent": false, "value": null}'
    replay = await ledger.run_once("action:echo:none", **kwargs)
    assert (replay.outcome, replay.value) == ("replayed", None)


async def test_no_key_runs_execute_without_a_row():
    echo = Echo()
    result = await call(echo, ledger.ledger_key("echo", None, None))
    assert (result.outcome, result.value, result.executed) == ("unledgered", "action echo: hello", True)
    assert await rows() == []


# --------------------------------------------------------------------------------------- claim tokens
def test_a_process_that_lost_its_row_to_a_reclaim_cannot_settle_or_release_it():
    t0 = timezone.now()
    common = {"action_name": "echo", "input_hash": HASH, "retryable": True, "lease": LEASE}
    slow = ledger.claim("action:echo:k", **common, now=t0)
    assert slow.outcome == "claimed"
    fresh = ledger.claim("action:echo:k", **common, now=t0 + timedelta(seconds=1))
    assert (fresh.outcome, fresh.age_ms) == ("reclaimed", 1000)
    assert ledger.claim("action:echo:k", **common, now=t0 + timedelta(seconds=1)).outcome == "pending"

    assert not ledger.release("action:echo:k", claimed_at=slow.claimed_at)
    assert ledger.settle("action:echo:k", "slow", claimed_at=slow.claimed_at) == (True, "slow")
    assert LedgerEntry.objects.get().status == "pending"
    assert ledger.settle("action:echo:k", "fresh", claimed_at=fresh.claimed_at) == (True, "fresh")
    replay = ledger.claim("action:echo:k", **common)
    assert (replay.outcome, replay.value) == ("replayed", "fresh")
    assert not ledger.release("action:echo:k")  # settled rows are never released


# ------------------------------------------------------------------------------------------- sweep
def make_row(key: str, status: str, updated_at: Any) -> None:
    LedgerEntry.objects.create(key=key, action_name="echo", input_hash=HASH, status=status,
                               created_at=updated_at, updated_at=updated_at)


def test_sweeps_expired_rows_without_deleting_fresh_ones(emitted):
    now = timezone.now()
    make_row("old-settled", "settled", now - timedelta(seconds=1))
    make_row("old-pending", "pending", now - timedelta(seconds=1))
    make_row("fresh-settled", "settled", now)
    ttl = timedelta(milliseconds=10)
    counts = ledger.sweep_expired(now=now, settled_ttl=ttl, pending_ttl=ttl, batch_size=10)
    assert counts == {"settled": 1, "pending": 1}
    assert list(LedgerEntry.objects.values_list("key", flat=True)) == ["fresh-settled"]
    assert emitted == [(events.LEDGER_SWEPT, {"settled": 1, "pending": 1})]


@pytest.mark.parametrize("batch_size", [1, 2, 7, 500])
def test_sweep_deletes_in_batches_oldest_first(batch_size):
    now = timezone.now()
    for i in range(7):
        make_row(f"s{i}", "settled", now - timedelta(days=31, minutes=i))
    for i in range(5):
        make_row(f"p{i}", "pending", now - timedelta(days=91, minutes=i))
    make_row("fresh-settled", "settled", now - timedelta(days=29))
    make_row("fresh-pending", "pending", now - timedelta(days=89))
    assert ledger.sweep_expired(now=now, batch_size=batch_size) == {"settled": 7, "pending": 5}
    assert sorted(LedgerEntry.objects.values_list("key", flat=True)) == ["fresh-pending", "fresh-settled"]
    assert ledger.sweep_expired(now=now, batch_size=batch_size) == {"settled": 0, "pending": 0}


def test_a_ttl_of_none_keeps_those_rows():
    now = timezone.now()
    make_row("old-settled", "settled", now - timedelta(days=400))
    make_row("old-pending", "pending", now - timedelta(days=400))
    assert ledger.sweep_expired(now=now, settled_ttl=None) == {"settled": 0, "pending": 1}
    assert ledger.sweep_expired(now=now, pending_ttl=None, settled_ttl=None) == {"settled": 0, "pending": 0}


def test_retention_setting_is_merged_over_the_defaults():
    now = timezone.now()
    make_row("a", "settled", now - timedelta(days=2))
    make_row("b", "pending", now - timedelta(days=2))
    with override_settings(AGENT_ACTION_LEDGER_RETENTION={"settled": timedelta(days=1)}):
        assert ledger.retention() == ledger.Retention(settled=timedelta(days=1))
        assert ledger.sweep_expired(now=now) == {"settled": 1, "pending": 0}
    assert ledger.retention() == ledger.Retention(
        settled=timedelta(days=30), pending=timedelta(days=90), batch_size=500)


def test_the_celery_task_sweeps_and_is_scheduled():
    make_row("old", "settled", timezone.now() - timedelta(days=31))
    assert tasks.sweep_action_ledger.delay().get() == {"settled": 1, "pending": 0}
    assert settings.CELERY_BEAT_SCHEDULE["agents-sweep-action-ledger"]["task"] == "agents_app.sweep_action_ledger"


# --------------------------------------------------------------------------------------- events
def test_a_failing_subscriber_is_logged_and_skipped(caplog):
    seen: list[str] = []

    def broken(name: str, data: dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    undo_broken = events.subscribe(broken)
    undo_seen = events.subscribe(lambda name, data: seen.append(name))
    with caplog.at_level(logging.INFO, logger="agents_app.events"):
        events.emit(events.LEDGER_SWEPT, settled=0, pending=0)
    undo_broken()
    undo_broken()
    undo_seen()
    events.emit(events.LEDGER_SWEPT, settled=0, pending=0)
    assert seen == ["action:ledger:swept"]
    assert any(r.levelno == logging.INFO and r.getMessage().startswith("action:ledger:swept") for r in caplog.records)
    assert any(r.levelno == logging.ERROR and "observer bug" in (r.exc_text or "") for r in caplog.records)


def test_event_names_are_the_spec_names():
    spec = {
        "LEDGER_REPLAYED": "action:ledger:replayed", "LEDGER_PENDING": "action:ledger:pending",
        "LEDGER_CONFLICT": "action:ledger:conflict", "LEDGER_SETTLED": "action:ledger:settled",
        "LEDGER_RECLAIMED": "action:ledger:reclaimed", "LEDGER_SERIALIZE_FAILED": "action:ledger:serialize_failed",
        "LEDGER_SWEPT": "action:ledger:swept", "PAUSE_CREATED": "action:pause:created",
        "PAUSE_APPROVED": "action:pause:approved", "PAUSE_REJECTED": "action:pause:rejected",
        "PAUSE_SWEPT": "action:pause:swept", "REPLY_ATTACHED": "action:reply-attached",
    }
    assert {name: getattr(events, name) for name in spec} == spec
