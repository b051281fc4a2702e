"""The pure part of chat recovery (docs/architecture.md#recovery-budget; the cases of the reference's
``recovery-incident.test.ts``): settings normalisation, the incident identity, the budget and the
progress classification. No Django."""

import math
from datetime import UTC, datetime, timedelta

import pytest

from agents_app.recovery.policy import (
    TERMINAL_MESSAGE,
    Budget,
    ChatRecovery,
    Reason,
    charge,
    exhausted_by,
    incident_id,
    is_content,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize("value", [True, False, None, {}])
def test_recovery_is_always_on_with_the_defaults(value):
    config = ChatRecovery.resolve(value)
    assert (config.max_attempts, config.stable_timeout, config.no_progress_timeout, config.max_recovery_work) == (
        10, 10.0, 300.0, 1000)
    assert config.terminal_message == TERMINAL_MESSAGE == (
        "The assistant was interrupted and could not recover. Please try again.")


@pytest.mark.parametrize(("given", "expected"), [
    ({"max_attempts": 0}, {"max_attempts": 1}),
    ({"max_attempts": 3.7}, {"max_attempts": 3}),
    ({"stable_timeout": -5}, {"stable_timeout": 0.0}),
    ({"no_progress_timeout": -1}, {"no_progress_timeout": 0.0}),
    ({"max_recovery_work": 0}, {"max_recovery_work": 0}),
    ({"max_recovery_work": math.inf}, {"max_recovery_work": math.inf}),
    ({"max_recovery_work": -3}, {"max_recovery_work": 1000}),
    ({"max_oom_retries": -1}, {"max_oom_retries": 0}),
    ({"max_oom_retries": 2.9}, {"max_oom_retries": 2}),
    ({}, {"max_oom_retries": 3}),
])
def test_settings_are_normalised_as_the_spec_table_says(given, expected):
    config = ChatRecovery.resolve(given)
    assert {key: getattr(config, key) for key in expected} == expected


def test_a_wrong_setting_is_refused():
    with pytest.raises(TypeError):
        ChatRecovery.resolve({"max_atempts": 3})
    with pytest.raises(TypeError):
        ChatRecovery.resolve(3)  # type: ignore[arg-type]


def test_the_incident_identity_is_the_root_request_and_latest_user_message():
    assert incident_id("r1", "u7") == "r1:u7"


def test_a_new_incident_starts_at_attempt_one_and_counts_its_content():
    started = NOW - timedelta(seconds=30)
    assert charge(None, 0, now=NOW, started_at=started) == Budget(attempt=1, work=0, last_progress_at=started)
    assert charge(None, 5, now=NOW, started_at=started) == Budget(attempt=1, work=5, last_progress_at=NOW)


def test_an_attempt_without_content_spends_one_and_progress_resets_the_count():
    earlier = NOW - timedelta(minutes=1)
    spent = Budget(attempt=3, work=40, last_progress_at=earlier)
    assert charge(spent, 0, now=NOW, started_at=NOW) == Budget(attempt=4, work=40, last_progress_at=earlier)
    assert charge(spent, 2, now=NOW, started_at=NOW) == Budget(attempt=1, work=42, last_progress_at=NOW)


def test_the_budgets_in_their_order():
    config = ChatRecovery(max_attempts=2, no_progress_timeout=60, max_recovery_work=100)
    fresh = NOW - timedelta(seconds=1)
    assert exhausted_by(config, Budget(2, 0, fresh), now=NOW) is None
    assert exhausted_by(config, Budget(3, 0, fresh), now=NOW) == Reason.MAX_ATTEMPTS
    assert exhausted_by(config, Budget(1, 0, NOW - timedelta(seconds=61)), now=NOW) == Reason.NO_PROGRESS
    assert exhausted_by(config, Budget(1, 101, fresh), now=NOW) == Reason.WORK_BUDGET
    # The attempt cap wins over the others when several are spent.
    assert exhausted_by(config, Budget(3, 101, NOW - timedelta(hours=1)), now=NOW) == Reason.MAX_ATTEMPTS


def test_an_infinite_work_budget_never_runs_out():
    config = ChatRecovery(max_recovery_work=math.inf)
    assert exhausted_by(config, Budget(1, 10**9, NOW), now=NOW) is None


def test_a_zero_work_budget_seals_any_content():
    config = ChatRecovery.resolve({"max_recovery_work": 0})
    assert exhausted_by(config, Budget(1, 0, NOW), now=NOW) is None
    assert exhausted_by(config, Budget(1, 1, NOW), now=NOW) == Reason.WORK_BUDGET


@pytest.mark.parametrize(("chunk", "content"), [
    ({"type": "text-delta", "delta": "x"}, True),
    ({"type": "reasoning-delta", "delta": "x"}, True),
    ({"type": "tool-input-available", "toolCallId": "c"}, True),
    ({"type": "tool-output-available", "toolCallId": "c"}, True),
    ({"type": "data-progress", "data": {}}, True),
    ({"type": "start"}, False),
    ({"type": "start-step"}, False),
    ({"type": "text-start", "id": "t"}, False),
    ({"type": "finish"}, False),
])
def test_progress_is_content_not_framing(chunk, content):
    assert is_content(chunk) is content


def test_an_out_of_memory_cut_spends_the_oom_budget_and_is_never_progress():
    """An attempt the platform killed for memory counts against ``max_oom_retries`` (never reset by progress),
    and what it streamed before it died is not progress: it is the re-run that dies again.
    """
    started = NOW - timedelta(seconds=30)
    first = charge(None, 5, now=NOW, started_at=started, out_of_memory=True)
    assert first == Budget(attempt=1, work=0, last_progress_at=started, oom_attempts=1)
    second = charge(first, 7, now=NOW, started_at=started, out_of_memory=True)
    assert (second.attempt, second.work, second.oom_attempts) == (2, 0, 2)
    progressed = charge(second, 3, now=NOW, started_at=started)
    assert (progressed.attempt, progressed.work, progressed.oom_attempts) == (1, 3, 2)


@pytest.mark.parametrize(("retries", "ooms", "reason"), [
    (3, 3, None), (3, 4, Reason.OUT_OF_MEMORY), (0, 1, Reason.OUT_OF_MEMORY), (0, 0, None),
])
def test_the_oom_budget_seals_after_max_oom_retries_and_before_the_other_budgets(retries, ooms, reason):
    """More out-of-memory cuts than ``max_oom_retries`` give up with ``out_of_memory`` (0: on the first one),
    whatever the other budgets say.
    """
    config = ChatRecovery.resolve({"max_oom_retries": retries, "max_attempts": 1})
    budget = Budget(attempt=2 if reason else 1, work=0, last_progress_at=NOW, oom_attempts=ooms)
    assert exhausted_by(config, budget, now=NOW) == (reason or None)
