"""The ``action:*`` events of a call's life (docs/architecture.md#action-events), through real turns.

The reference's actions design names these events and their payloads; every one here also names
the call (``action``, ``requestId``, ``toolCallId``) so a subscriber can tell calls apart.
"""

from typing import Any

import pytest

from agents_app import events
from tests.action_agents import ActionTestAgent, probe
from tests.integration.test_actions import (
    APPROVAL,
    answer,
    ask,
    configure,
    fresh_probes,  # noqa: F401 (autouse: empties SETUP and PROBES)
    opened,
    seed,
    turn,
)
from tests.support.events import Events, names

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.emitted(prefixes=["action:"])]

LIFE = ("action:invoked", "action:authorized", "action:denied", "action:approval-requested",
        "action:approval-resolved", "action:settled", "action:replayed", "action:timed-out", "action:error")


def life(emitted: Events) -> Events:
    """The call-life events (not the ledger's or the pause's own), in order."""
    return [(name, data) for name, data in emitted if name in LIFE]


def call_of(data: dict[str, Any]) -> tuple[Any, ...]:
    return data.pop("action"), data.pop("requestId"), data.pop("toolCallId")


async def test_a_call_that_runs_is_invoked_authorized_and_settled(emitted: Events):
    """A call is announced when the model makes it (with the action's kind), then when authorization lets it
    through (with the permissions it required and those the turn granted), then when it settles (with how
    long ``execute`` took and whether the output was cut for the model).
    """
    configure("e1", permissions=["echo:run"], granted=["echo:run", "other:run"])
    await turn("e1")
    seen = life(emitted)
    assert names(seen) == ["action:invoked", "action:authorized", "action:settled"]
    calls = {call_of(data) for _, data in seen}
    [(action, request_id, tool_call_id)] = calls
    assert (action, tool_call_id) == ("echo", "demo_0_0") and request_id
    invoked, authorized, settled = (data for _, data in seen)
    assert invoked == {"kind": "server"}
    assert authorized == {"required": ["echo:run"], "granted": ["echo:run", "other:run"]}
    assert settled.keys() == {"durationMs", "truncated"} and settled["truncated"] is False
    assert isinstance(settled["durationMs"], int) and settled["durationMs"] >= 0


async def test_a_call_without_its_permissions_is_denied_and_never_settles(emitted: Events):
    """A refused call is announced as denied, with what it required, what was granted and why."""
    configure("e2", permissions=["echo:run"], granted=[])
    await turn("e2")
    assert names(life(emitted)) == ["action:invoked", "action:denied"]
    denied = life(emitted)[1][1]
    assert {k: denied[k] for k in ("required", "granted", "reason")} == {
        "required": ["echo:run"], "granted": [], "reason": "Missing required permission: echo:run"}


async def test_a_full_grant_reports_granted_as_none(emitted: Events):
    """When the turn grants everything (no explicit list), the authorized event says so with no list."""
    configure("e2b")
    await turn("e2b")
    authorized = dict(life(emitted))["action:authorized"]
    assert (authorized["required"], authorized["granted"]) == ([], None)


@pytest.mark.parametrize(("behaviour", "event", "error_name"), [
    ("hang", "action:timed-out", "Error"),
    ("throw", "action:error", "Error"),
])
async def test_a_call_that_times_out_or_raises_reports_the_error_the_model_reads(
        emitted: Events, behaviour: str, event: str, error_name: str):
    """A call whose ``execute`` passes its timeout, or raises, is announced with the error's name and message,
    as the model reads them in the tool's output.
    """
    name = f"e3-{behaviour}"
    configure(name, behaviour=behaviour, timeout_ms=50)
    messages = await turn(name)
    output = next(p for m in messages for p in m.get("parts", []) if p.get("toolCallId") == "demo_0_0")["output"]
    assert names(life(emitted)) == ["action:invoked", "action:authorized", event]
    data = life(emitted)[-1][1]
    call_of(data)
    assert data == output["error"] and data["name"] == error_name


async def test_a_cut_output_is_reported_as_truncated(emitted: Events):
    """The reference cuts an action's output too large for the model, and its actions design has the
    settled event say whether it did: ``truncated`` is true for an output that was cut."""
    configure("e4", behaviour="large")
    await turn("e4")
    assert dict(life(emitted))["action:settled"]["truncated"] is True


async def test_a_ledger_replay_is_reported_as_replayed_not_settled(emitted: Events):
    """A call whose key the ledger already settled is not run again: it is announced as replayed from the ledger."""
    configure("e5", key="done-key")
    await seed("action:echo:done-key", name="e5", status="settled")
    await turn("e5")
    assert names(life(emitted)) == ["action:invoked", "action:authorized", "action:replayed"]
    assert life(emitted)[-1][1]["from"] == "ledger"
    assert probe("e5").count == 0


@pytest.mark.parametrize("approved", [True, False])
async def test_an_approval_gated_call_reports_the_request_and_the_users_decision(ws, emitted: Events,
                                                                                 approved: bool):
    """Asking the user is announced (with the action's kind) when the approval request goes out, and the
    user's answer, either way, when it is applied; an approved call is then invoked and settled.
    """
    name = f"e6-{approved}"
    configure(name, **APPROVAL)
    a = await opened(ws, name)
    await ask(a)
    assert names(life(emitted)) == ["action:approval-requested"]
    requested = life(emitted)[0][1]
    assert call_of(requested)[::2] == ("echo", "demo_0_0") and requested == {"kind": "approval-gated"}
    await answer(a, approved)
    after = life(emitted)[1:]
    expected = ["action:approval-resolved", "action:invoked", "action:authorized", "action:settled"]
    assert names(after) == (expected if approved else expected[:1])
    resolved = after[0][1]
    assert call_of(resolved)[::2] == ("echo", "demo_0_0") and resolved == {"approved": approved}


async def test_a_durable_pause_reports_its_park_and_the_staff_decision(emitted: Events):
    """A call that parks for staff is announced as an approval request of kind durable-pause; the staff
    decision is announced as resolved, and an approved call then runs and settles.
    """
    configure("e7")
    await turn("e7", '/tool pauseAction {"message": "hi"}')
    assert names(life(emitted)) == ["action:invoked", "action:authorized", "action:approval-requested"]
    assert life(emitted)[-1][1]["kind"] == "durable-pause"
    agent = await ActionTestAgent.aget("e7")
    [pending] = await agent.pending_approvals()
    await agent.approve_execution(pending["executionId"])
    after = life(emitted)[3:]
    assert names(after)[:3] == ["action:approval-resolved", "action:invoked", "action:settled"]
    assert after[0][1]["approved"] is True and after[0][1]["toolCallId"] == "demo_0_0"


async def test_subscribe_takes_a_channel_or_a_name_prefix():
    """Besides every event, a subscriber may ask for one of the reference's channels (``chat`` carries the
    ``chat:*`` events; ``message`` carries ``message:*``, ``tool:*`` and ``action:*``) or for a name prefix.
    """
    seen: dict[str, list[str]] = {"chat": [], "message": [], "action:ledger:": [], "all": []}
    stops = [events.subscribe(key, lambda name, data, key=key: seen[key].append(name)) for key in seen if key != "all"]
    stops.append(events.subscribe(lambda name, data: seen["all"].append(name)))
    try:
        configure("e8")
        await turn("e8")
    finally:
        for stop in stops:
            stop()
    assert seen["chat"] and all(name.startswith("chat:") for name in seen["chat"])
    assert "chat:turn:start" in seen["chat"] and "message:request" not in seen["chat"]
    assert {"message:request", "action:invoked", "action:ledger:settled"} <= set(seen["message"])
    assert not any(name.startswith("chat:") for name in seen["message"])
    assert seen["action:ledger:"] == ["action:ledger:settled"]
    assert sorted(seen["all"]) == sorted(seen["chat"] + seen["message"])
