"""System checks (``manage.py check``): each reports its problem under its own id."""

from typing import Any

import pytest
from django.core.checks import Error
from django.test import override_settings
from pydantic import BaseModel

from agents_app import ChatAgent, action, checks
from agents_app.registry import agent_classes


class NoInput(BaseModel):
    pass


class NotAnActionAgent(ChatAgent):
    def get_actions(self) -> dict[str, Any]:
        return {"refund": lambda: None}


class CleanActionsAgent(ChatAgent):
    def get_actions(self) -> dict[str, Any]:
        return {"noop": action(description="Nothing", input_schema=NoInput, execute=lambda input, ctx: None)}


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


def test_the_configured_agents_pass_every_check() -> None:
    assert checks.check_agent_classes(None) == []
    assert checks.check_agent_actions(None) == []
