"""What is stored, and how much (docs/architecture.md#transcript-storage; the cases of the reference's
``max-persisted-messages`` and ``row-size-guard`` tests), and the step limit that ends a turn cleanly
(``max_steps``, the reference's ``maxSteps``).

On SQLite here; ``tests/crossprocess/test_storage_databases.py`` runs the storage writes on PostgreSQL too.
"""

import json
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents_app import transcript
from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance, ChatMessage, StreamRecord
from agents_app.protocol import codec
from agents_app.sanitize import ROW_MAX_BYTES, byte_length
from tests.agents import SECRET, BoundedAgent, OneStepAgent, StorageAgent
from tests.support.frames import RESP, chat_request, chunks, is_done, open_agent, receive_until, user_message

pytestmark = pytest.mark.django_db(transaction=True)


async def stored(handle: Any) -> list[dict[str, Any]]:
    return await database_sync_to_async(transcript.load)(handle.instance)


async def test_max_persisted_messages_keeps_the_newest_and_deletes_the_oldest_after_each_write(user):
    agent = await BoundedAgent.aget("bounded", owner=user)
    for text in ("one", "two", "three"):
        assert (await agent.save_messages([text])).status == "completed"
    messages = await stored(agent)
    assert len(messages) == 4
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[0]["parts"][0]["text"] == "two"


async def test_max_persisted_messages_deletes_a_large_excess_in_batches(user):
    agent = await BoundedAgent.aget("excess", owner=user)
    assert (await agent.save_messages([f"m{i}" for i in range(250)])).status == "completed"
    messages = await stored(agent)
    assert len(messages) == 4
    assert [m["parts"][0].get("text") for m in messages[:3]] == ["m247", "m248", "m249"]


async def test_unlimited_by_default(user):
    agent = await DemoAgent.aget("unbounded", owner=user)
    for text in ("one", "two", "three"):
        await agent.save_messages([text])
    assert len(await stored(agent)) == 6


async def test_a_huge_tool_output_streams_whole_and_is_stored_compacted(ws):
    a = await open_agent(ws, "/agents/storage-agent/huge")
    await a.send_json_to(chat_request("r1", [user_message("u1", "/tool big_report {}")]))
    frames = await receive_until(a, is_done("r1"), timeout=30)
    [streamed] = [c for c in chunks(frames) if c["type"] == "tool-output-available"]
    assert len(streamed["output"]["rows"]) == 12_000  # the client got it whole
    assert not any(f.get("error") for f in frames if f["type"] == RESP)
    instance = await AgentInstance.objects.aget(slug="storage-agent", name="huge")
    [reply] = [m for m in await database_sync_to_async(transcript.load)(instance) if m["role"] == "assistant"]
    assert byte_length(reply) <= ROW_MAX_BYTES
    [call] = [p for p in reply["parts"] if p["type"] == "tool-big_report"]
    assert reply["metadata"]["compactedToolOutputs"] == [call["toolCallId"]]
    assert len(json.dumps(call["output"], separators=(",", ":"))) <= 1_000
    # The stream buffer kept every chunk it could; the oversized one was sent, not stored.
    assert await StreamRecord.objects.filter(instance=instance, status="completed").aexists()


async def test_the_agents_sanitize_hook_runs_on_what_is_stored(user):
    agent = await StorageAgent.aget("hook", owner=user)
    assert (await agent.save_messages([f"my key is {SECRET}"])).status == "completed"
    raw = await database_sync_to_async(lambda: json.dumps([row.data for row in ChatMessage.objects.all()]))()
    assert SECRET not in raw
    assert "[redacted]" in raw


def test_only_messages_whose_json_changed_are_written(db: None) -> None:
    instance = AgentInstance.objects.create(slug="demo-agent", name="incremental")
    messages = [user_message("u1", "hi"), {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "yo"}]}]
    transcript.persist(instance, messages)
    with CaptureQueriesContext(connection) as queries:
        transcript.persist(instance, messages)
    assert not message_writes(queries)
    with CaptureQueriesContext(connection) as queries:
        transcript.persist(instance, [messages[0], {**messages[1], "parts": [{"type": "text", "text": "yo!"}]}])
    assert len(message_writes(queries)) == 1


def test_a_stored_message_is_compared_by_its_text_and_else_by_its_value(db: None) -> None:
    """On SQLite a client's copy is matched to the stored text (``transcript._Row.same_as``); a row
    with another text of the same message (the ORM's spacing, keys in another order) is compared
    by value, and neither is written again. What ``persist`` returns is what is stored."""
    instance = AgentInstance.objects.create(slug="demo-agent", name="texts")
    reply = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "yo"}]}
    messages = [user_message("u1", "héllo"), reply, user_message("u2", "again")]
    transcript.persist(instance, messages)
    assert stored_texts(instance) == [codec.dumps(message) for message in messages]
    # The ORM's text of u1 (", " and ": ", ASCII escapes), a1's keys in another order.
    ChatMessage.objects.filter(instance=instance, message_id="u1").update(data=messages[0])
    ChatMessage.objects.filter(instance=instance, message_id="a1").update(data=dict(reversed(messages[1].items())))
    texts = stored_texts(instance)
    assert texts[0] == json.dumps(messages[0]) != codec.dumps(messages[0]) and texts[1] != codec.dumps(messages[1])
    with CaptureQueriesContext(connection) as queries:
        returned = transcript.persist(instance, [dict(message) for message in messages])
    assert not message_writes(queries)
    assert returned == transcript.load(instance) == messages
    # A changed message is written with the codec's text; rows the client left out come back read.
    changed = {**messages[1], "parts": [{"type": "text", "text": "yo!"}]}
    with CaptureQueriesContext(connection) as queries:
        returned = transcript.persist(instance, [changed, user_message("u3", "new")])
    assert [q["sql"].split()[0] for q in message_writes(queries)] == ["UPDATE", "INSERT"]
    assert returned == transcript.load(instance) == [messages[0], changed, messages[2], user_message("u3", "new")]
    assert stored_texts(instance)[1] == codec.dumps(changed)


def stored_texts(instance: AgentInstance) -> list[str]:
    """The JSON texts of the instance's message rows as SQLite holds them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT data FROM agents_app_chatmessage WHERE instance_id = %s ORDER BY position",
                       [instance.pk])
        return [text for (text,) in cursor.fetchall()]


def message_writes(queries: CaptureQueriesContext) -> list[dict[str, str]]:
    """INSERTs and UPDATEs of message rows (the instance row is touched by every persist: lock order)."""
    return [q for q in queries.captured_queries
            if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE")) and "agents_app_chatmessage" in q["sql"]]


async def test_reaching_max_steps_ends_the_turn_cleanly_with_its_reply_saved(ws):
    assert OneStepAgent.max_steps == 1
    a = await open_agent(ws, "/agents/one-step-agent/steps")
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool big_report {"rows": 2}')]))
    frames = await receive_until(a, is_done("r1"))
    types = [c["type"] for c in chunks(frames)]
    assert types[-2:] == ["finish-step", "finish"]
    assert "tool-output-available" in types
    assert not any(f.get("error") for f in frames)
    assert "outcome" not in frames[-1]
    instance = await AgentInstance.objects.aget(slug="one-step-agent", name="steps")
    [reply] = [m for m in await database_sync_to_async(transcript.load)(instance) if m["role"] == "assistant"]
    assert [p["state"] for p in reply["parts"] if p["type"] == "tool-big_report"] == ["output-available"]
