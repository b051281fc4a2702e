"""The README's agent example runs as written (a doc that runs stays true)."""

import contextlib
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import override_settings

from tests.support.frames import chat_request, is_done, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parents[2] / "README.md"


@contextlib.contextmanager
def readme_module(heading: str, module_name: str, agent_class: str) -> Iterator[types.ModuleType]:
    """The first Python block under ``heading``, importable as ``module_name``, its agent registered."""
    section = README.read_text().split(heading, 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType(module_name)
    exec(compile(code, "README.md", "exec"), module.__dict__)
    sys.modules[module_name] = module
    try:
        with override_settings(AGENT_CLASSES=[*settings.AGENT_CLASSES, f"{module_name}.{agent_class}"]):
            yield module
    finally:
        del sys.modules[module_name]


@pytest.fixture
def readme_agents() -> Iterator[types.ModuleType]:
    with readme_module("## Writing an agent", "readme_agents", "SupportAgent") as module:
        yield module


async def test_support_agent_from_the_readme_answers_with_its_tool(readme_agents, ws):
    assert readme_agents.SupportAgent.slug() == "support-agent"
    a = await ws("/agents/support-agent/shop-1")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool lookup_order {"order_id": "42"}')]))
    frames = await receive_until(a, is_done("r1"))
    assert text_of(frames) == "lookup_order returned Order 42: shipped."


@pytest.fixture
def readme_actions() -> Iterator[types.ModuleType]:
    with readme_module("### Actions", "readme_actions", "ShopAgent") as module:
        yield module


async def test_shop_agent_from_the_readme_refunds_once_and_parks_its_deploy(readme_actions, make_user):
    from channels.db import database_sync_to_async

    from agents_app import transcript

    staff = await database_sync_to_async(make_user)("staffer", is_staff=True)
    agent = await readme_actions.ShopAgent.aget("shop-1", owner=staff)
    refund = '/tool refund_order {"order_id": "A1", "amount": 20}'
    await agent.save_messages([refund])
    await agent.save_messages([refund])
    # Programmatic turns have no user: authorize_turn grants nothing, so the refund is refused.
    assert readme_actions.REFUNDS == {}
    messages = await database_sync_to_async(transcript.load)(agent.instance)
    refused = [p for m in messages for p in m["parts"] if p.get("type") == "tool-refund_order"]
    assert refused[0]["output"]["error"]["name"] == "ActionAuthorizationError"

    await agent.save_messages(['/tool deploy {"order_id": "v2", "amount": 1}'])
    [pending] = await agent.pending_approvals()
    assert await agent.approve_execution(pending["executionId"], actor=staff) == "Refunded 1.0 on v2"
    assert list(readme_actions.REFUNDS.values()) == ["v2"]
    assert await agent.pending_approvals() == []


async def test_shop_agent_refunds_once_for_a_staff_user_over_the_websocket(readme_actions, make_user):
    from channels.db import database_sync_to_async

    from tests.conftest import connect

    staff = await database_sync_to_async(make_user)("staffer", is_staff=True)
    a, connected, _ = await connect("/agents/shop-agent/shop-2", staff)
    assert connected
    await a.receive_json_from()
    await a.receive_json_from()
    refund = '/tool refund_order {"order_id": "B7", "amount": 20}'
    for request_id in ("r1", "r2"):
        await a.send_json_to(chat_request(request_id, [user_message(f"u-{request_id}", refund)]))
        frames = await receive_until(a, is_done(request_id))
        assert text_of(frames) == "refund_order returned Refunded 20.0 on B7."
    assert readme_actions.REFUNDS == {"action:refund_order:refund:B7": "B7"}
    await a.disconnect()


@pytest.fixture
def readme_schedules() -> Iterator[types.ModuleType]:
    with readme_module("### Scheduled prompts", "readme_schedules", "OpsAgent") as module:
        yield module


async def test_ops_agent_from_the_readme_declares_its_tasks_and_they_run(readme_schedules):
    from agents_app import transcript
    from agents_app.models import Schedule
    from agents_app.schedules import runs

    handle = await readme_schedules.OpsAgent.aget("shop-1")
    rows = {row.name: row async for row in Schedule.objects.filter(instance=handle.instance)}
    assert {name: (row.action, row.spec["normalized"], row.spec.get("timezone")) for name, row in rows.items()} == {
        "daily_report": ("prompt", "every day at 09:00", "UTC"), "cleanup": ("handler", "every 2 hours", None)}
    report = await runs.run_now(rows["daily_report"].pk)
    cleanup = await runs.run_now(rows["cleanup"].pk)
    messages = ["".join(p.get("text", "") for p in m["parts"]) for m in await database_sync_to_async(
        transcript.load)(handle.instance)]
    assert messages == ["Generate the daily report.", "(demo model, offline) You said: Generate the daily report.",
                        f"Cleanup {cleanup.occurrence_key} done."]
    assert report.occurrence_key.startswith("daily_report:")
