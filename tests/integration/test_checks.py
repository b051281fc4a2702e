"""System checks (``manage.py check``): each reports its problem under its own id."""

from typing import Any

import pytest
from django.core.checks import Error
from django.test import override_settings
from pydantic import BaseModel

from agents_app import ChatAgent, Debounce, action, checks
from agents_app.registry import agent_classes


class NoInput(BaseModel):
    pass


class NotAnActionAgent(ChatAgent):
    def get_actions(self) -> dict[str, Any]:
        return {"refund": lambda: None}


class CleanActionsAgent(ChatAgent):
    def get_actions(self) -> dict[str, Any]:
        return {"noop": action(description="Nothing", input_schema=NoInput, execute=lambda input, ctx: None)}


class MisconfiguredAgent(ChatAgent):
    message_concurrency = "newest"  # type: ignore[assignment] - what the check is for
    max_persisted_messages = -1
    max_steps = 0
    recovery_strategy = "prefil"


class WellConfiguredAgent(ChatAgent):
    message_concurrency = Debounce(ms=200)
    max_persisted_messages = 0
    max_steps = 3
    recovery_strategy = "synthetic"


@pytest.fixture(autouse=True)
def fresh_registry() -> Any:
    agent_classes.cache_clear()
    yield
    agent_classes.cache_clear()


@override_settings(AGENT_CLASSES=["tests.integration.test_checks.NotAnActionAgent",
                                  "tests.integration.test_checks.CleanActionsAgent"])
def test_e003_reports_a_get_actions_entry_that_is_not_an_action() -> None:
    assert checks.check_agent_actions(None) == [Error(
        'NotAnActionAgent (not-an-action-agent): get_actions() entry "refund" must be created with action().',
        hint="Fix its get_actions().", id=checks.E003,
    )]


@override_settings(AGENT_CLASSES=["tests.integration.test_checks.CleanActionsAgent"])
def test_valid_actions_pass_the_checks() -> None:
    assert checks.check_agent_actions(None) == []
    assert checks.check_agent_classes(None) == []


@override_settings(AGENT_CLASSES=["tests.integration.test_checks.Missing"])
def test_e001_reports_an_agent_class_that_does_not_import() -> None:
    [error] = checks.check_agent_classes(None)
    assert error.id == checks.E001
    assert checks.check_agent_actions(None) == []


@override_settings(AGENT_CLASSES=["tests.integration.test_checks.MisconfiguredAgent",
                                  "tests.integration.test_checks.WellConfiguredAgent"])
def test_e005_reports_agent_options_with_values_they_do_not_take() -> None:
    prefix = "MisconfiguredAgent (misconfigured-agent): "
    assert [(e.id, e.msg) for e in checks.check_agent_options(None)] == [
        (checks.E005, prefix + "message_concurrency must be one of queue, latest, merge, drop or Debounce(ms=...), "
                               "not 'newest'"),
        (checks.E005, prefix + "max_persisted_messages must be None or an integer ≥ 0, not -1"),
        (checks.E005, prefix + "max_steps must be None or an integer ≥ 1, not 0"),
        (checks.E005, prefix + "recovery_strategy must be None or one of prefill, synthetic, retrieve, not 'prefil'"),
    ]


def test_the_configured_agents_pass_every_check() -> None:
    assert checks.check_agent_classes(None) == []
    assert checks.check_agent_actions(None) == []
    assert checks.check_agent_options(None) == []
    assert checks.check_sqlite_version(None) == []


def test_e007_reports_a_sqlite_library_without_update_returning(monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    [error] = checks.check_sqlite_version(None)
    assert (error.id, error.msg) == (checks.E007, "SQLite 3.34.1 is too old: the agents app needs 3.35 or later "
                                                  "(UPDATE … RETURNING).")
