"""Sub-agents (docs/architecture.md#sub-agents): ``await agent.sub_agent(ChildAgent, "child-1")``, the child's
``chat()`` with a stream callback, its own address under the parent's, and an agent as a tool.

The reference's own example is ``test_the_reference_parent_child_example``: a parent's callable
method hands a research task to ``child-1`` and returns what the callback saw.
"""

import asyncio
import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from agents_app import transcript
from agents_app.errors import UnknownAgent
from agents_app.llm.demo import ECHO_PREFIX
from agents_app.models import AgentInstance, Turn
from tests.agents import ChildAgent, ParentAgent
from tests.integration.test_rpc import call
from tests.support.frames import (
    chat_request,
    chunks,
    is_done,
    message_text,
    open_agent,
    receive_until,
    user_message,
)

pytestmark = pytest.mark.django_db(transaction=True)

PATIENCE = 15


async def test_the_reference_parent_child_example(ws, user):
    a = await open_agent(ws, "/agents/parent-agent/p1")
    answer = await call(a, "c1", "research", "the history of Oslo")
    assert answer["success"] is True, answer
    seen, request_id = answer["result"]["seen"], answer["result"]["request_id"]
    assert seen[0] == ["start", request_id]
    assert seen[-1] == ["done"] and seen.count(["done"]) == 1
    events = [chunk for kind, *rest in seen if kind == "event" for chunk in rest]
    assert [e["type"] for e in events][:3] == ["start", "start-step", "text-start"]
    assert [e["type"] for e in events][-3:] == ["text-end", "finish-step", "finish"]
    assert "".join(e.get("delta", "") for e in events) == ECHO_PREFIX + "the history of Oslo"
    # The child is an instance of its own, under its parent, with the parent's owner.
    parent = await AgentInstance.objects.aget(slug="parent-agent", name="p1")
    child = await AgentInstance.objects.select_related("parent").aget(slug="child-agent", name="child-1")
    assert (child.parent_id, child.owner_id, child.address) == (
        parent.pk, user.pk, "parent-agent/p1/sub/child-agent/child-1")
    stored = await database_sync_to_async(transcript.load)(child)
    assert [(m["role"], message_text(m)) for m in stored] == [
        ("user", "the history of Oslo"), ("assistant", ECHO_PREFIX + "the history of Oslo")]
    assert await database_sync_to_async(transcript.load)(parent) == []


async def test_a_sub_agent_has_its_own_address_under_its_parent(ws, user, make_user):
    handle = await ParentAgent.aget("p2", owner=user)
    child = await handle.sub_agent(ChildAgent, "child-1")
    await child.save_messages(["hello child"])
    # Its own WebSocket: /agents/<parent>/<name>/sub/<child>/<name> (the npm client's `sub` option).
    b = await ws("/agents/parent-agent/p2/sub/child-agent/child-1")
    assert await b.receive_json_from() == {"type": "cf_agent_identity", "name": "child-1", "agent": "child-agent"}
    await b.receive_json_from()  # MCP servers
    await b.send_json_to(chat_request("r1", [user_message("u1", "and again")]))
    await receive_until(b, is_done("r1"), timeout=PATIENCE)
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    response = await database_sync_to_async(client.get)("/agents/parent-agent/p2/sub/child-agent/child-1/get-messages")
    assert [message_text(m) for m in response.json()] == [
        "hello child", ECHO_PREFIX + "hello child", "and again", ECHO_PREFIX + "and again"]
    page = (await database_sync_to_async(client.get)("/chat/parent-agent/p2/sub/child-agent/child-1/")).content.decode()
    assert 'data-address="parent-agent/p2/sub/child-agent/child-1"' in page
    assert 'href="/chat/parent-agent/p2/"' in page  # back to the parent
    parent_page = (await database_sync_to_async(client.get)("/chat/parent-agent/p2/")).content.decode()
    assert 'href="/chat/parent-agent/p2/sub/child-agent/child-1/"' in parent_page
    # Another user's address of the same name is in their own namespace, where nobody wrote to it:
    # empty, and reading it makes nothing.
    bob = Client()
    await database_sync_to_async(bob.force_login)(await database_sync_to_async(make_user)("bob"))
    theirs = await database_sync_to_async(bob.get)("/agents/parent-agent/p2/sub/child-agent/child-1/get-messages")
    assert (theirs.status_code, theirs.json()) == (200, [])
    assert await AgentInstance.objects.filter(name="child-1").acount() == 1


async def test_a_malformed_or_unknown_sub_address_is_refused(ws, user):
    b = await ws("/agents/parent-agent/p3/sub/no-such-agent/x")
    frame = await b.receive_json_from()
    assert (frame["type"], frame["code"]) == ("cf_agent_error", "UnknownAgent")
    client = Client()
    await database_sync_to_async(client.force_login)(user)
    assert (await database_sync_to_async(client.get)("/chat/parent-agent/p3/sub/child-agent/")).status_code == 404


async def test_sub_agent_of_a_class_that_is_not_served_is_refused(user):
    class Unlisted(ChildAgent):
        pass

    handle = await ParentAgent.aget("p4", owner=user)
    with pytest.raises(UnknownAgent, match="not in AGENT_CLASSES"):
        await handle.sub_agent(Unlisted, "x")


async def test_cancel_chat_mid_stream_keeps_the_partial_and_calls_neither_done_nor_error(user):
    child = await (await ParentAgent.aget("p5", owner=user)).sub_agent(ChildAgent, "slow")
    calls: list[str] = []
    started = asyncio.Event()
    words = asyncio.Event()

    class Callback:
        def on_start(self, info: dict[str, Any]) -> None:
            calls.append(info["request_id"])
            started.set()

        def on_event(self, chunk: str) -> None:
            if json.loads(chunk)["type"] == "text-delta":
                words.set()

        def on_done(self) -> None:
            calls.append("done")

        def on_error(self, message: str) -> None:
            calls.append("error")

    running = asyncio.ensure_future(child.chat("/slow 200 20", Callback()))
    await asyncio.wait_for(words.wait(), PATIENCE)
    assert await child.cancel_chat(calls[0], "enough") is True
    result = await asyncio.wait_for(running, PATIENCE)
    assert result.status == "aborted"
    assert calls == [result.request_id]  # on_start only
    stored = await database_sync_to_async(transcript.load)(child.instance)
    assert message_text(stored[-1]).startswith("w0 ")
    assert await child.cancel_chat(result.request_id) is False  # over: a no-op


async def test_an_agent_as_a_tool_streams_its_progress_and_returns_its_text(ws, user):
    a = await open_agent(ws, "/agents/demo-agent/research")
    await a.send_json_to(chat_request("r1", [user_message("u1", 'research task "the history of Oslo"')]))
    frames = await receive_until(a, is_done("r1"), timeout=PATIENCE)
    outputs = [c for c in chunks(frames) if c["type"] == "tool-output-available"]
    preliminary = [c["output"] for c in outputs if c.get("preliminary")]
    final = [c["output"] for c in outputs if not c.get("preliminary")]
    report = ("Researching the history of Oslo. Sources checked: 3 (demo). Summary: the history of Oslo is a demo "
              "topic; no real research was done (offline demo model). ")
    assert preliminary and preliminary[0]["agent"] == "research-agent" and preliminary[0]["status"] == "running"
    assert report.startswith(preliminary[0]["text"])
    assert final == [report]
    parent = await AgentInstance.objects.aget(slug="demo-agent", name="research", owner=user)
    [child] = [c async for c in AgentInstance.objects.filter(parent=parent)]
    assert child.slug == "research-agent" and child.name.startswith("research-")
    stored = await database_sync_to_async(transcript.load)(child)
    assert [message_text(m) for m in stored] == ["the history of Oslo", report]
    reply = (await database_sync_to_async(transcript.load)(parent))[-1]
    assert "research returned" in message_text(reply)


async def test_cancelling_the_parent_cancels_the_sub_agents_turn(ws, user):
    a = await open_agent(ws, "/agents/tool-parent-agent/cancel")
    await a.send_json_to(chat_request("r1", [user_message("u1", 'delegate task "/slow 300 20"')]))
    await receive_until(a, lambda f: '"preliminary":true' in f.get("body", ""), timeout=PATIENCE)
    await a.send_json_to({"type": "cf_agent_chat_request_cancel", "id": "r1"})
    await receive_until(a, is_done("r1"), timeout=PATIENCE)
    child = await AgentInstance.objects.aget(slug="child-agent", parent__name="cancel")

    async def child_turn_ended() -> bool:
        return not await Turn.objects.of(child).active().aexists()

    async with asyncio.timeout(PATIENCE):
        while not await child_turn_ended():
            await asyncio.sleep(0.05)
    turn = await Turn.objects.of(child).alast()
    assert turn is not None and turn.status == Turn.Status.ABORTED


async def test_tools_passed_to_chat_are_ignored_with_a_warning(user):
    child = await (await ParentAgent.aget("p6", owner=user)).sub_agent(ChildAgent, "tools")
    with pytest.warns(UserWarning, match="tools belong to the agent"):
        result = await child.chat("hi", object(), tools=[print])
    assert result.status == "completed"

