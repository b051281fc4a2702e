"""Per-agent action policies: an ``authorize_action`` override, and the ledger lease set on the class.

Both are the reference's per-agent knobs (docs/architecture.md#authorization,
docs/architecture.md#ledger), run here through real turns of the demo model or through the
compiled tool, against the real database.
"""

from datetime import timedelta
from typing import Any, ClassVar

import pytest
from django.test import override_settings
from django.utils import timezone

from agents_app import checks
from agents_app.actions import ledger
from agents_app.actions.context import ActionAuthorizationContext, AuthorizationDecision
from agents_app.actions.pipeline import execute_action
from agents_app.models import LedgerEntry
from tests.action_agents import SETUP, ActionTestAgent, Setup, probe
from tests.integration.test_actions import (
    PENDING,
    fresh_probes,  # noqa: F401 (autouse: empties SETUP and PROBES)
    part,
    turn,
)

pytestmark = pytest.mark.django_db(transaction=True)


# ------------------------------------------------------------------ authorize_action overridden
def last_call(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The last tool part of the transcript: the call the turn just made."""
    return [p for m in messages for p in m.get("parts", []) if "toolCallId" in p][-1]


def refuse_secret_echo(ctx: ActionAuthorizationContext) -> AuthorizationDecision | bool:
    """Deny ``echo`` when its input asks for the secret; allow every other call."""
    if ctx.action == "echo" and ctx.input.message == "secret":
        return AuthorizationDecision(allowed=False, reason="Echoing the secret is not allowed")
    return True


async def test_an_authorize_action_override_denies_one_call_by_its_input_and_allows_others():
    """An agent may override ``authorize_action`` to decide each call from its context, input included.

    A denied call never runs: the model gets an authorization error carrying the override's
    reason (and the permissions the action requires, none here). Calls the override allows run as
    usual, whether of the same action with other input or of another action.
    """
    SETUP["auth"] = Setup(authorize=refuse_secret_echo, attach="none")
    denied = last_call(await turn("auth", '/tool echo {"message": "secret"}'))
    assert denied["output"] == {"error": {"name": "ActionAuthorizationError",
                                          "message": "Echoing the secret is not allowed", "permissions": []}}
    assert probe("auth").count == 0
    allowed = last_call(await turn("auth", '/tool echo {"message": "hello"}'))
    assert allowed["output"] == "action echo: hello"
    assert probe("auth").count == 1
    other = last_call(await turn("auth", "/tool attachAction {}"))
    assert other["output"] == "attached"


async def test_an_override_sees_the_required_and_granted_permissions_and_the_turn_decision():
    """The override's context carries what the default decision uses: the action's kind, the permissions the
    call requires, those the turn granted, and the turn-level decision; returning a dict works as a bool does.
    """
    seen: list[ActionAuthorizationContext] = []

    def record(ctx: ActionAuthorizationContext) -> dict[str, Any]:
        seen.append(ctx)
        return {"allowed": True}

    SETUP["ctx"] = Setup(authorize=record, permissions=["echo:run"], granted=["other:run"])
    assert part(await turn("ctx"))["output"] == "action echo: hello"
    [ctx] = seen
    assert (ctx.action, ctx.kind, ctx.required_permissions, ctx.granted_permissions) == (
        "echo", "server", ("echo:run",), ("other:run",))
    assert ctx.turn.allowed and ctx.tool_call_id == "demo_0_0" and ctx.request_id


# ---------------------------------------------------------- the pending-retry lease, per agent
class ShortLeaseAgent(ActionTestAgent):
    action_ledger_pending_retry_lease: ClassVar[timedelta | None] = timedelta(milliseconds=50)


class NoReclaimAgent(ActionTestAgent):
    action_ledger_pending_retry_lease: ClassVar[timedelta | None] = None


class BrokenLeaseAgent(ActionTestAgent):
    action_ledger_pending_retry_lease: ClassVar[Any] = 300_000


async def direct(agent_class: type[ActionTestAgent], name: str) -> Any:
    """The compiled echo tool of ``agent_class`` called outside a turn (tool call id ``tc-direct``)."""
    agent = agent_class.for_turn((await agent_class.aget(name)).instance, request_id="")
    action = agent.compiled_actions()["echo"]
    return await execute_action(agent.turn, action, action.validate_input({"message": "hello"}),
                                tool_call_id="tc-direct", messages=[])


async def seed_stale(agent_class: type[ActionTestAgent], name: str, age: timedelta) -> None:
    """A pending ``echo`` row with key ``stale-key``, ``age`` old, in the ledger of ``agent_class``/``name``."""
    instance = (await agent_class.aget(name)).instance
    stamp = timezone.now() - age
    await LedgerEntry.objects.acreate(
        scope=str(instance.pk), key="action:echo:stale-key", action_name="echo", status="pending",
        input_hash=ledger.input_hash({"message": "hello"}), created_at=stamp, updated_at=stamp, result_json="",
    )


@override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=timedelta(days=1))
async def test_an_agent_class_lease_overrides_the_setting():
    """The lease after which a stale pending ledger row may run again is an option of each agent, defaulting
    to the global one: a class with a short lease reclaims a row the global lease still protects.
    """
    SETUP["short"] = Setup(key="stale-key")
    await seed_stale(ShortLeaseAgent, "short", timedelta(seconds=1))
    assert await direct(ShortLeaseAgent, "short") == "action echo: hello"
    assert probe("short").count == 1
    SETUP["default"] = Setup(key="stale-key")
    await seed_stale(ActionTestAgent, "default", timedelta(seconds=1))
    assert await direct(ActionTestAgent, "default") == PENDING
    assert probe("default").count == 0


@override_settings(AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE=timedelta(milliseconds=50))
async def test_a_class_lease_of_none_never_reclaims_even_when_the_setting_would():
    """Disabling the lease on a class (the reference's ``false``) keeps a pending row refused however old."""
    SETUP["never"] = Setup(key="stale-key")
    await seed_stale(NoReclaimAgent, "never", timedelta(days=1))
    assert await direct(NoReclaimAgent, "never") == PENDING
    assert probe("never").count == 0


@override_settings(AGENT_CLASSES=["tests.integration.test_action_policies.BrokenLeaseAgent"])
def test_a_lease_that_is_not_a_timedelta_fails_the_system_check():
    [error] = checks.check_agent_options(None)
    assert error.id == checks.E005
    assert error.msg == ("BrokenLeaseAgent (broken-lease-agent): "
                         "BrokenLeaseAgent.action_ledger_pending_retry_lease must be a timedelta or None.")
