"""Once a turn's last frames are out, its exchange is validated and converted for the next request
(``ui_messages.prepare``), which re-sends it as ``useAgentChat`` does: that request finds both in
the caches and converts only its own message."""

import uuid
from typing import Any

import pytest
from channels.db import database_sync_to_async

from agents_app import transcript
from agents_app.llm import ui_messages
from agents_app.models import AgentInstance
from tests.support.frames import chat_request, is_done, open_agent, receive_until, user_message
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)


async def test_the_next_request_finds_the_reply_it_sends_back_prepared(ws: Any) -> None:
    tag = uuid.uuid4().hex  # messages no other test has put in the caches
    a = await open_agent(ws, f"/agents/demo-agent/prepared-{tag}")
    first = user_message(f"u1-{tag}", f"hello {tag}")
    await a.send_json_to(chat_request("r1", [first]))
    await receive_until(a, is_done("r1"))
    stored = await database_sync_to_async(
        lambda: transcript.load(AgentInstance.objects.get(name=f"prepared-{tag}")))()
    assert stored[0]["id"] == first["id"] and stored[-1]["role"] == "assistant"

    async def prepared() -> bool:
        exchanges = list(ui_messages._converted_exchanges.values())
        return any([message.id for message in messages] == [m["id"] for m in stored] for messages, _ in exchanges)

    await eventually(prepared, "the turn's exchange converted after its end", timeout=10)
    following = [*stored, user_message(f"u2-{tag}", "again")]
    misses = ui_messages._validated_json.cache_info().misses
    ui_messages.check(following)  # the request's check, at the door
    assert ui_messages._validated_json.cache_info().misses == misses + 1  # its new message alone
