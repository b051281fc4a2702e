"""Bad input gets a clear error frame or close code, and loses nothing."""

import json

import pytest
from django.test import AsyncClient

from agents_app.models import ChatMessage
from tests.conftest import connect
from tests.support.frames import chat_request, is_done, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/agents/demo-agent/bad"


async def ready(ws):
    a = await ws(PATH)
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r0", [user_message("u0", "before")]))
    await receive_until(a, is_done("r0"))
    return a


async def still_works(a, history_len=2):
    """The same connection still runs turns, and the stored transcript is intact."""
    assert await ChatMessage.objects.acount() == history_len
    await a.send_json_to(chat_request("r9", [user_message("u0", "before"), user_message("u9", "after")]))
    frames = await receive_until(a, is_done("r9"))
    assert text_of(frames).endswith("after")


def init(**overrides):
    frame = chat_request("rx", [user_message("ux", "x")])
    frame["init"].update(overrides)
    return frame


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("{not json", "invalid_json"),
        ("[1, 2]", "invalid_frame"),
        ('{"no": "type"}', "invalid_frame"),
        ('{"type": "cf_agent_teleport"}', "unknown_type"),
        ('{"type": "cf_agent_use_chat_request"}', "missing_field"),
        ('{"type": "cf_agent_use_chat_request", "id": "rx"}', "missing_field"),
        (json.dumps(init(method="GET")), "invalid_method"),
        (json.dumps(init(body="{oops")), "invalid_json"),
        (json.dumps(init(body="[]")), "invalid_frame"),
        (json.dumps(init(body=json.dumps({"trigger": "submit-message"}))), "missing_field"),
        (json.dumps(init(body=json.dumps({"messages": [{"id": "m", "parts": []}]}))), "invalid_message"),
        (json.dumps(init(body=json.dumps({"messages": [], "clientTools": "x"}))), "invalid_client_tools"),
        ('{"type": "cf_agent_chat_request_cancel"}', "missing_field"),
        ('{"type": "cf_agent_chat_messages", "messages": "x"}', "missing_field"),
        ('{"type": "cf_agent_stream_resume_ack"}', "missing_field"),
        ('{"type": "cf_agent_tool_approval", "toolCallId": "t"}', "missing_field"),
    ],
)
async def test_malformed_frames_get_an_error_frame(ws, raw, code):
    a = await ready(ws)
    await a.send_to(text_data=raw)
    frame = await a.receive_json_from()
    assert frame["type"] == "cf_agent_error"
    assert frame["code"] == code
    assert frame["error"]
    await still_works(a)


async def test_error_frame_names_the_request(ws):
    a = await ready(ws)
    await a.send_json_to(init(method="GET"))
    assert (await a.receive_json_from())["id"] == "rx"


async def test_a_request_id_used_before_in_the_conversation_is_refused_and_nothing_is_stored(ws):
    a = await ready(ws)
    await a.send_json_to(chat_request("r0", [user_message("u0", "before"), user_message("u1", "again")]))
    frame = await a.receive_json_from()
    assert (frame["type"], frame["code"], frame["id"]) == ("cf_agent_error", "duplicate_request_id", "r0")
    assert not await ChatMessage.objects.filter(message_id="u1").aexists()
    await still_works(a)


async def test_ten_megabyte_frame_is_refused(ws):
    a = await ready(ws)
    huge = chat_request("rbig", [user_message("ubig", "x" * (10 * 1024 * 1024))])
    await a.send_json_to(huge)
    frame = await a.receive_json_from()
    assert frame["code"] == "frame_too_large"
    assert "exceeds the limit" in frame["error"]
    await still_works(a)


async def test_other_connections_unaffected_by_bad_frames(ws):
    a = await ready(ws)
    b = await ws(PATH)
    await b.receive_json_from()
    await b.receive_json_from()
    await b.send_to(text_data="garbage")
    assert (await b.receive_json_from())["code"] == "invalid_json"
    assert await a.receive_nothing(0.05)
    await still_works(a)


async def test_unknown_agent_is_closed_with_4404(user):
    communicator, connected, _ = await connect("/agents/no-such-agent/x", user)
    assert connected
    frame = await communicator.receive_json_from()
    assert frame["type"] == "cf_agent_error" and frame["code"] == "UnknownAgent"
    assert "no-such-agent" in frame["error"]
    assert (await communicator.receive_output())["code"] == 4404


async def test_anonymous_is_closed_with_4401(db):
    communicator, connected, _ = await connect("/agents/demo-agent/x", None)
    assert connected
    assert (await communicator.receive_json_from())["code"] == "NotAuthenticated"
    assert (await communicator.receive_output())["code"] == 4401


async def test_another_users_namespace_is_closed_with_4403(ws, make_user):
    await ws("/agents/demo-agent/alices")  # alice creates and owns it
    bob = await make_user_async(make_user, "bob")
    communicator, _connected, _ = await connect("/agents/demo-agent/alices?owner=alice", bob)
    frame = await communicator.receive_json_from()
    assert frame["code"] == "PermissionDenied"
    assert frame["error"] == "Only staff may open another user's conversation"
    assert (await communicator.receive_output())["code"] == 4403


async def test_staff_may_open_another_users_instance(ws, make_user):
    await ws("/agents/demo-agent/alices")
    staff = await make_user_async(make_user, "boss", is_staff=True)
    communicator, _connected, _ = await connect("/agents/demo-agent/alices?owner=alice", staff)
    assert (await communicator.receive_json_from())["type"] == "cf_agent_identity"
    await communicator.disconnect()


async def test_shared_agent_classes_are_open_to_every_user(ws, make_user):
    await ws("/agents/shared-room-agent/lobby")
    bob = await make_user_async(make_user, "bob")
    communicator, _, _ = await connect("/agents/shared-room-agent/lobby", bob)
    assert (await communicator.receive_json_from())["type"] == "cf_agent_identity"
    await communicator.disconnect()


async def test_missing_origin_is_rejected(user):
    _, connected, _ = await connect("/agents/demo-agent/x", user, origin=False)
    assert not connected


async def test_get_messages_access(make_user, ws):
    await ws("/agents/demo-agent/alices")
    client = AsyncClient()
    assert (await client.get("/agents/demo-agent/alices/get-messages")).status_code == 401
    bob = await make_user_async(make_user, "bob")
    await client.aforce_login(bob)
    assert (await client.get("/agents/demo-agent/alices/get-messages?owner=alice")).status_code == 403
    assert (await client.get("/agents/nope/x/get-messages")).status_code == 400


async def test_get_messages_of_a_name_nobody_wrote_to_is_empty_and_takes_nothing(user, make_user):
    """Reading is not opening, nor is connecting: the first message makes the conversation."""
    from agents_app.models import AgentInstance

    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get("/agents/demo-agent/not-yet/get-messages")
    assert (response.status_code, response.json()) == (200, [])
    # Staff reading a namespace where nobody wrote to that name: 404, and nothing is made either.
    staff = await make_user_async(make_user, "boss", is_staff=True)
    await client.aforce_login(staff)
    response = await client.get("/agents/demo-agent/not-yet/get-messages?owner=alice")
    assert (response.status_code, response.json()) == (
        404, {"error": "There is no conversation demo-agent/not-yet of alice"})
    assert not await AgentInstance.objects.filter(name="not-yet").aexists()
    bob = await make_user_async(make_user, "bob")
    communicator, _, _ = await connect("/agents/demo-agent/not-yet", bob)
    assert (await communicator.receive_json_from())["type"] == "cf_agent_identity"
    await communicator.disconnect()
    assert not await AgentInstance.objects.filter(name="not-yet").aexists()


async def make_user_async(make_user, name, **extra):
    from channels.db import database_sync_to_async

    return await database_sync_to_async(make_user)(name, **extra)
