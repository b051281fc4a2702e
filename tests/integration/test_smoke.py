import pytest

from tests.support.frames import chat_request, is_done, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)


async def test_turn_streams_and_persists(ws):
    a = await ws()
    assert (await a.receive_json_from())["type"] == "cf_agent_identity"
    assert (await a.receive_json_from())["type"] == "cf_agent_mcp_servers"
    await a.send_json_to(chat_request("r1", [user_message("u1", "hello there")]))
    frames = await receive_until(a, is_done("r1"))
    print(frames)
    assert text_of(frames) == "(demo model, offline) You said: hello there"
