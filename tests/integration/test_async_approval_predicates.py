"""An async approval predicate is awaited: ``tool(fn, needs_approval=async_fn)`` and an action's
``approval=async_fn`` ask only when what the predicate returns says so (its coroutine object is
truthy, and was once taken for "ask")."""

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import override_settings
from pydantic import BaseModel

from agents_app import transcript
from agents_app.actions import Action, action
from agents_app.actions.context import ActionContext
from agents_app.demo.agents import DemoAgent
from agents_app.tools import tool

pytestmark = pytest.mark.django_db(transaction=True)

async def needs_a_look(args: dict[str, Any]) -> bool:
    """Only big shipments wait for the user (an async predicate, as the reference's examples write them)."""
    return int(args["count"]) > 10


def ship(count: int) -> str:
    """Ship some boxes."""
    return f"Shipped {count} boxes."


class ShipInput(BaseModel):
    count: int


async def big_order(input: ShipInput, ctx: ActionContext) -> bool:
    return input.count > 10


class AsyncGateAgent(DemoAgent):
    """A plain tool and an action, both gated by an async predicate."""

    def get_tools(self) -> list[object]:
        return [tool(ship, needs_approval=needs_a_look)]

    def get_actions(self) -> dict[str, Action[BaseModel]]:
        return {"order_boxes": action(description="Order boxes", input_schema=ShipInput,
                                      execute=lambda input, ctx: f"Ordered {input.count} boxes.",
                                      approval=big_order)}


@pytest.mark.parametrize("name", ["ship", "order_boxes"])
@pytest.mark.parametrize(("count", "state"), [(3, "output-available"), (30, "approval-requested")])
async def test_an_async_approval_predicate_is_awaited(user, name, count, state):
    with override_settings(AGENT_CLASSES=[*settings.AGENT_CLASSES, f"{__name__}.AsyncGateAgent"]):
        handle = await AsyncGateAgent.aget(f"{name}-{count}", owner=user)
        assert (await handle.save_messages([f"{name} count {count}"])).status == "completed"
        messages = await database_sync_to_async(transcript.load)(handle.instance)
    [part] = [p for m in messages for p in m["parts"] if p["type"] == f"tool-{name}"]
    assert part["state"] == state
