"""Each turn's model usage is stored with the turn; a user or agent over its quota is refused
before any model request (docs/operations.md#usage-and-quotas).

The model is ``tests/support/fake_openai_server.py``, a real local OpenAI-compatible server
that reports ``prompt_tokens=11, completion_tokens=7`` per request and records every request it
gets: the quota test counts them there.
"""

from decimal import Decimal
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import override_settings

from agents_app.llm import demo
from agents_app.models import Turn, TurnUsage, UsageQuota
from tests.integration import test_providers
from tests.integration.test_providers import Provider, assert_error_then_done, run_turn, turn_of
from tests.support.fake_openai_server import TextReply, ToolCall, ToolCallsReply
from tests.support.frames import chunks, user_message

pytestmark = pytest.mark.django_db(transaction=True)

# The provider tests' fixtures: the local server, and the demo agent's chat pointed at it.
fake_openai, allow_model_requests = test_providers.fake_openai, test_providers.allow_model_requests
provider, chat = test_providers.provider, test_providers.chat

IN, OUT = 11, 7  # the fake server's usage of every request


async def usage_of(request_id: str) -> TurnUsage:
    return await TurnUsage.objects.select_related("turn").aget(turn__request_id=request_id)


async def test_a_turn_stores_its_model_usage_and_cost(
    provider: Provider, chat: WebsocketCommunicator, user: Any
) -> None:
    provider.server.script(TextReply(["Hello ", "there."]))
    prices = {provider.model_name: {"input": "2.00", "output": "8.00"}}
    with override_settings(AGENT_MODEL_PRICES=prices):
        await run_turn(chat, "r1", [user_message("u1", "Hi")])

    stored = await usage_of("r1")
    assert (stored.model, stored.requests, stored.input_tokens, stored.output_tokens) == (
        provider.model_name,
        1,
        IN,
        OUT,
    )
    assert (stored.agent, stored.user_id, stored.limit) == ("demo-agent", user.pk, "")
    assert stored.cost == (Decimal("2.00") * IN + Decimal("8.00") * OUT) / 1_000_000


async def test_a_tool_turn_counts_every_model_request(provider: Provider, chat: WebsocketCommunicator) -> None:
    call = ToolCall("get_weather", '{"city": "Paris"}', id="call_paris")
    provider.server.script(ToolCallsReply([call]), TextReply(["Sunny."]))

    await run_turn(chat, "r1", [user_message("u1", "Weather in Paris?")])

    stored = await usage_of("r1")
    assert len(provider.server.requests) == 2
    assert (stored.requests, stored.input_tokens, stored.output_tokens) == (2, 2 * IN, 2 * OUT)
    assert stored.cost is None  # no price table


@pytest.mark.parametrize("per_user_override", [False, True])
async def test_a_user_at_their_limit_gets_an_error_frame_and_no_model_request(
    provider: Provider, chat: WebsocketCommunicator, user: Any, per_user_override: bool
) -> None:
    provider.server.script(TextReply(["One."]), TextReply(["Never sent."]))
    if per_user_override:  # the admin's per-user quota replaces the (unlimited) default
        await UsageQuota.objects.acreate(user=user, tokens_per_day=IN + OUT)
        quotas: dict[str, Any] = {}
    else:
        quotas = {"user_per_day": IN + OUT}
    with override_settings(AGENT_USAGE_QUOTAS=quotas):
        await run_turn(chat, "r1", [user_message("u1", "Hi")])
        assert len(provider.server.requests) == 1

        frames = await run_turn(chat, "r2", [user_message("u1", "Hi"), user_message("u2", "Again")])

    text = assert_error_then_done(
        frames, "r2", "Usage quota reached", f"{IN + OUT} of your {IN + OUT} tokens", "this day"
    )
    assert "resets at midnight" in text
    assert len(provider.server.requests) == 1, "no model request was made for the refused turn"
    assert (await turn_of("r2")).status == Turn.Status.ERROR
    refused = await usage_of("r2")
    assert (refused.limit, refused.requests, refused.input_tokens, refused.user_id) == ("user per day", 0, 0, user.pk)


async def test_an_agent_over_its_monthly_limit_is_refused_for_every_user(
    provider: Provider, chat: WebsocketCommunicator, ws: Any, make_user: Any
) -> None:
    provider.server.script(TextReply(["One."]))
    with override_settings(AGENT_USAGE_QUOTAS={"agent_per_month": {"demo-agent": IN + OUT}}):
        await run_turn(chat, "r1", [user_message("u1", "Hi")])
        bob = await ws("/agents/demo-agent/default", as_user=await database_sync_to_async(make_user)("bob"))
        assert (await bob.receive_json_from())["type"] == "cf_agent_identity"
        assert (await bob.receive_json_from())["type"] == "cf_agent_mcp_servers"
        frames = await run_turn(bob, "r2", [user_message("u1", "Hello")])

    assert_error_then_done(frames, "r2", "this agent has used 18 of its 18 tokens this month")
    assert len(provider.server.requests) == 1
    assert (await usage_of("r2")).limit == "agent per month"


async def test_the_offline_demo_model_reports_usage(chat: WebsocketCommunicator) -> None:
    frames = await run_turn(chat, "r1", [user_message("u1", "Hi")])

    stored = await usage_of("r1")
    words = sum(len(c["delta"].split()) for c in chunks(frames) if c["type"] == "text-delta")
    assert (stored.model, stored.requests, stored.output_tokens) == (demo.MODEL_NAME, 1, words)
    assert stored.input_tokens > 0
