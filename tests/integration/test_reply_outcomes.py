"""A reply that failed or was stopped keeps that outcome in its stored message's ``metadata``.

The terminal frame says how a turn ended only to the connections that were there; the stored
message is what a reloaded page, the REST API and later connections read, so it carries the
outcome too (``outcome`` as the terminal frame names it, ``errorText`` as the error chunk does).
"""

from typing import Any

import pytest
from django.test import AsyncClient

from agents_app.models import ChatMessage, Turn
from tests.support.frames import chat_request, follow_continuation, is_done, receive_until, text_of, user_message
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)


async def skip_connect_frames(communicator: Any) -> None:
    assert (await communicator.receive_json_from())["type"] == "cf_agent_identity"
    assert (await communicator.receive_json_from())["type"] == "cf_agent_mcp_servers"


async def rest_messages(user: Any, name: str) -> list[dict[str, Any]]:
    """The conversation as the REST API gives it."""
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(f"/api/agents/demo-agent/{name}/messages/")
    assert response.status_code == 200
    messages: list[dict[str, Any]] = response.json()
    return messages


async def get_messages(user: Any, name: str) -> list[dict[str, Any]]:
    """The conversation as the npm client's ``get-messages`` fetch gives it."""
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(f"/agents/demo-agent/{name}/get-messages")
    assert response.status_code == 200
    messages: list[dict[str, Any]] = response.json()
    return messages


async def test_a_failed_reply_is_stored_with_its_error(ws: Any, user: Any) -> None:
    a = await ws("/agents/demo-agent/outcome-error")
    b = await ws("/agents/demo-agent/outcome-error")
    await skip_connect_frames(a)
    await skip_connect_frames(b)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/fail")]))
    got = await receive_until(a, is_done("r1"))
    error_frame = next(f for f in got if f.get("error") is True)
    assert got[-1]["outcome"] == "error"
    stored = (await rest_messages(user, "outcome-error"))[-1]
    assert stored["role"] == "assistant"
    assert stored["parts"][-1]["text"] == text_of(got)  # the partial text stays
    assert stored["metadata"]["outcome"] == "error"
    assert stored["metadata"]["errorText"] == error_frame["body"]
    assert (await get_messages(user, "outcome-error"))[-1] == stored
    # Another connection of the conversation gets it in the final transcript, before the end.
    observed = await receive_until(b, is_done("r1"))
    assert observed[-2]["type"] == "cf_agent_chat_messages"
    assert observed[-2]["messages"][-1] == stored


async def test_a_stopped_reply_is_stored_as_aborted(ws: Any, user: Any) -> None:
    a = await ws("/agents/demo-agent/outcome-stop")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/slow 300 10")]))
    await receive_until(a, lambda f: f.get("seq") == 6)
    await a.send_json_to({"type": "cf_agent_chat_request_cancel", "id": "r1"})
    assert (await receive_until(a, is_done("r1")))[-1]["outcome"] == "aborted"
    stored = (await rest_messages(user, "outcome-stop"))[-1]
    assert stored["role"] == "assistant" and stored["parts"]
    assert stored["metadata"]["outcome"] == "aborted"
    assert "errorText" not in stored["metadata"]
    assert (await get_messages(user, "outcome-stop"))[-1] == stored
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.ABORTED


async def test_a_completed_reply_has_no_outcome_mark(ws: Any, user: Any) -> None:
    """A plain completion stays as it was: no mark to show."""
    a = await ws("/agents/demo-agent/outcome-ok")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "hello")]))
    await receive_until(a, is_done("r1"))

    async def stored() -> dict[str, Any] | None:
        messages = await rest_messages(user, "outcome-ok")
        return messages[-1] if messages and messages[-1]["role"] == "assistant" else None

    reply = await eventually(stored, "the stored reply", timeout=5.0)
    assert "outcome" not in reply.get("metadata", {})
    assert "errorText" not in reply.get("metadata", {})


async def test_the_senders_copy_without_the_mark_does_not_erase_it(ws: Any, user: Any) -> None:
    """The page that sent ``/fail`` built the reply from the stream, without the stored mark, and
    sends that copy back with its next request: the stored mark stays."""
    a = await ws("/agents/demo-agent/outcome-next")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/fail")]))
    await receive_until(a, is_done("r1"))
    history = await rest_messages(user, "outcome-next")
    marked = history[-1]["metadata"]
    senders_copy = [*history[:-1], {k: v for k, v in history[-1].items() if k != "metadata"}]
    await a.send_json_to(chat_request("r2", [*senders_copy, user_message("u2", "still there?")]))
    assert text_of(await receive_until(a, is_done("r2"))).endswith("still there?")
    after = await rest_messages(user, "outcome-next")
    assert [m["role"] for m in after] == ["user", "assistant", "user", "assistant"]
    assert after[1]["metadata"] == marked
    assert "outcome" not in after[3].get("metadata", {})


async def test_a_continuation_that_ends_normally_clears_the_mark(ws: Any, user: Any) -> None:
    """A reply stopped while a client tool call waited, then continued with the tool's result and
    finished: it is no longer a stopped reply."""
    a = await ws("/agents/demo-agent/outcome-continued")
    await skip_connect_frames(a)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/tool getBrowserInfo")]))
    await receive_until(a, is_done("r1"))
    # The stored reply as the end of a stopped turn leaves it (the call still waits for its result).
    row = await ChatMessage.objects.aget(instance__name="outcome-continued", role="assistant")
    row.data = {**row.data, "metadata": {**row.data.get("metadata", {}), "outcome": "aborted"}}
    await row.asave(update_fields=["data"])
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "toolName": "getBrowserInfo",
                          "output": {"language": "fr"}, "autoContinue": True})
    await follow_continuation(a)
    stored = (await rest_messages(user, "outcome-continued"))[-1]
    assert stored["id"] == row.message_id
    assert stored["parts"][-1]["type"] == "text"  # the continuation's summary
    assert "outcome" not in stored.get("metadata", {})
