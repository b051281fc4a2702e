"""The REST API of conversations (list, create, read, delete, send a message, a turn's status) for
their owner, another user, staff and anonymous callers; the API root, schema and docs.

Messages sent here run their turn through the Celery task by name; with CELERY_TASK_ALWAYS_EAGER
(the test settings) it runs inline, before the request returns.
"""

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from asgiref.sync import sync_to_async
from django.test import Client, override_settings
from rest_framework.test import APIClient

from agents_app.conversations import service as conversations
from agents_app.models import AgentInstance, ChatMessage, Turn
from tests.conftest import connect
from tests.support.frames import is_done, receive_until, text_of

ECHO = "(demo model, offline) You said: "
INSTANCES = "/api/instances/"
DEFAULT = "/api/agents/demo-agent/default/"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def alice(make_user: Callable[..., Any]) -> Any:
    return make_user("alice")


def client_of(user: Any = None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


@pytest.fixture
def as_alice(alice: Any) -> APIClient:
    return client_of(alice)


@pytest.fixture
def as_bob(make_user: Callable[..., Any]) -> APIClient:
    return client_of(make_user("bob"))


@pytest.fixture
def as_staff(make_user: Callable[..., Any]) -> APIClient:
    return client_of(make_user("sam", is_staff=True))


@pytest.fixture
def alices_default(as_alice: APIClient) -> AgentInstance:
    assert as_alice.post(INSTANCES, {"agent": "demo-agent", "name": "default"}, format="json").status_code == 201
    return AgentInstance.objects.get(name="default")


# --------------------------------------------------------------------------------------- the API itself
def test_the_api_root_lists_its_links_without_a_login(db: None) -> None:
    response = Client().get("/api/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert response.json() == {name: f"http://testserver/api/{path}" for name, path in [
        ("instances", "instances/"), ("approvals", "approvals/"), ("usage", "usage/"), ("schema", "schema/"),
        ("docs", "docs/"),
        ("redoc", "redoc/")]}


def test_the_browsable_api_shows_docstring_literals_as_code(alice: Any) -> None:
    client = Client()
    client.force_login(alice)
    page = client.get("/api/", HTTP_ACCEPT="text/html").content.decode()
    assert "<p><code>/api/</code>: where the API&#x27;s collections and its documentation are.</p>" in page
    assert "``" not in page


def test_the_schema_shows_in_a_browser_and_is_yaml_on_request(db: None) -> None:
    browser = Client().get("/api/schema/", HTTP_ACCEPT="text/html,application/xhtml+xml,*/*;q=0.8")
    assert browser["Content-Type"] == "application/json"
    assert browser["Content-Disposition"].startswith("inline;")
    assert yaml.safe_load(Client().get("/api/schema/?format=yaml").content)["openapi"].startswith("3.")


def schema() -> dict[str, Any]:
    return Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()


def descriptions(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [v for k, v in node.items() if k in ("description", "summary") and isinstance(v, str)]
        return own + [d for v in node.values() for d in descriptions(v)]
    if isinstance(node, list):
        return [d for v in node for d in descriptions(v)]
    return []


def test_the_schema_has_every_endpoint_with_markdown_descriptions_and_examples(db: None) -> None:
    document = schema()
    paths = document["paths"]
    assert {"/api/", "/api/instances/", "/api/agents/{slug}/{name}/", "/api/agents/{slug}/{name}/messages/",
            "/api/agents/{slug}/{name}/turns/{request_id}/"} <= set(paths)
    texts = descriptions(document)
    assert texts
    assert not [text for text in texts if "``" in text]
    send = paths["/api/agents/{slug}/{name}/messages/"]["post"]
    assert {"200", "202"} <= set(send["responses"])
    assert send["requestBody"]["content"]["application/json"]["examples"]
    assert "wait" in [p["name"] for p in send["parameters"]]
    for path, operations in paths.items():
        for method, operation in operations.items():
            assert operation.get("description"), f"{method} {path} has no description"


@pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/"])
def test_the_docs_load_their_scripts_from_this_server(db: None, path: str) -> None:
    page = Client().get(path).content.decode()
    assert "/static/drf_spectacular_sidecar/" in page
    assert not re.findall(r"https?://[^\s\"']+", page)


# --------------------------------------------------------------------------------------- the list
def test_the_list_shows_your_conversations_and_shared_ones(as_alice: APIClient, as_bob: APIClient) -> None:
    as_alice.post(INSTANCES, {"agent": "demo-agent", "name": "mine"}, format="json")
    as_bob.post(INSTANCES, {"agent": "demo-agent", "name": "bobs"}, format="json")
    as_bob.post(INSTANCES, {"agent": "shared-room-agent", "name": "lobby"}, format="json")
    listed = as_alice.get(INSTANCES).json()
    assert [(i["agent"], i["name"], i["owner"]) for i in listed["results"]] == [
        ("shared-room-agent", "lobby", None), ("demo-agent", "mine", "alice")]
    assert listed["results"][1] == {
        "agent": "demo-agent", "name": "mine", "owner": "alice", "created_at": listed["results"][1]["created_at"],
        "updated_at": listed["results"][1]["updated_at"], "url": "http://testserver/api/agents/demo-agent/mine/",
        "chat_url": "http://testserver/chat/demo-agent/mine/", "websocket_path": "/agents/demo-agent/mine"}
    assert [i["name"] for i in as_alice.get(INSTANCES, {"agent": "demo-agent"}).json()["results"]] == ["mine"]


@pytest.mark.parametrize(("method", "path"), [
    ("get", INSTANCES), ("post", INSTANCES), ("get", DEFAULT), ("delete", DEFAULT), ("get", f"{DEFAULT}messages/"),
    ("post", f"{DEFAULT}messages/"), ("get", f"{DEFAULT}turns/r1/"),
])
def test_anonymous_callers_get_401(db: None, method: str, path: str) -> None:
    assert getattr(client_of(), method)(path).status_code == 401


# --------------------------------------------------------------------------------------- create
def test_create_a_named_conversation_once(as_alice: APIClient, as_bob: APIClient) -> None:
    response = as_alice.post(INSTANCES, {"agent": "demo-agent", "name": "default"}, format="json")
    assert response.status_code == 201
    assert response["Location"] == "http://testserver/api/agents/demo-agent/default/"
    assert response.json()["owner"] == "alice"
    again = as_alice.post(INSTANCES, {"agent": "demo-agent", "name": "default"}, format="json")
    assert again.status_code == 409
    assert again.json() == {"detail": "There is already a conversation demo-agent/default"}
    # Bob's names are his own.
    assert as_bob.post(INSTANCES, {"agent": "demo-agent", "name": "default"}, format="json").status_code == 201


def test_create_without_a_name_makes_a_fresh_one(as_alice: APIClient) -> None:
    name = as_alice.post(INSTANCES, {"agent": "demo-agent"}, format="json").json()["name"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[0-9a-f]{4}", name)


def test_a_shared_agents_conversation_has_no_owner(as_alice: APIClient) -> None:
    assert as_alice.post(INSTANCES, {"agent": "shared-room-agent", "name": "lobby"},
                         format="json").json()["owner"] is None


@pytest.mark.parametrize(("body", "field"), [
    ({"agent": "no-such-agent"}, "agent"), ({"agent": "demo-agent", "name": "a b"}, "name"),
    ({"agent": "demo-agent", "name": "a/b"}, "name"), ({"agent": "demo-agent", "name": "x\n"}, "name"),
    ({"agent": "demo-agent", "name": "x" * 201}, "name"), ({}, "agent"),
])
def test_create_refuses_bad_input(as_alice: APIClient, body: dict[str, Any], field: str) -> None:
    response = as_alice.post(INSTANCES, body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not AgentInstance.objects.exists()


# --------------------------------------------------------------------------------------- read
@pytest.mark.parametrize(("who", "query", "status"), [
    ("owner", "", 200), ("other", "", 404), ("other", "?owner=alice", 403), ("staff", "?owner=alice", 200),
    ("staff", "", 404), ("staff", "?owner=nobody", 404),
])
def test_read_a_conversation(alices_default: AgentInstance, as_alice: APIClient, as_bob: APIClient,
                             as_staff: APIClient, who: str, query: str, status: int) -> None:
    client = {"owner": as_alice, "other": as_bob, "staff": as_staff}[who]
    response = client.get(f"{DEFAULT}{query}")
    assert response.status_code == status
    if status == 200:
        expected = "" if who == "owner" else "?owner=alice"
        assert response.json()["url"] == f"http://testserver{DEFAULT}{expected}"
        assert response.json()["websocket_path"] == f"/agents/demo-agent/default{expected}"


# --------------------------------------------------------------------------------------- delete
def test_the_owner_deletes_their_conversation_with_its_transcript(alices_default: AgentInstance,
                                                                   as_alice: APIClient) -> None:
    as_alice.post(f"{DEFAULT}messages/?wait=true", {"text": "Hello"}, format="json")
    assert as_alice.delete(DEFAULT).status_code == 204
    assert not AgentInstance.objects.exists()
    assert not ChatMessage.objects.exists() and not Turn.objects.exists()
    assert as_alice.get(DEFAULT).status_code == 404


@pytest.mark.parametrize(("who", "query", "status", "detail"), [
    ("other", "", 404, "There is no conversation demo-agent/default of bob"),
    ("other", "?owner=alice", 403, "Only staff may open another user's conversation"),
    ("staff", "?owner=alice", 403, "Only its owner may delete a conversation"),
])
def test_only_the_owner_deletes(alices_default: AgentInstance, as_bob: APIClient, as_staff: APIClient,
                                who: str, query: str, status: int, detail: str) -> None:
    response = {"other": as_bob, "staff": as_staff}[who].delete(f"{DEFAULT}{query}")
    assert (response.status_code, response.json()["detail"]) == (status, detail)
    assert AgentInstance.objects.filter(pk=alices_default.pk).exists()


def test_a_shared_conversation_is_nobodys_to_delete(as_alice: APIClient) -> None:
    as_alice.post(INSTANCES, {"agent": "shared-room-agent", "name": "lobby"}, format="json")
    assert as_alice.delete("/api/agents/shared-room-agent/lobby/").status_code == 403


def test_a_conversation_with_a_reply_on_the_way_is_not_deleted(alices_default: AgentInstance,
                                                               as_alice: APIClient) -> None:
    Turn.objects.create(instance=alices_default, request_id="r-queued")
    response = as_alice.delete(DEFAULT)
    assert (response.status_code, response.json()["detail"]) == (
        409, "A reply is still queued or running; stop it first")
    assert AgentInstance.objects.filter(pk=alices_default.pk).exists()


# --------------------------------------------------------------------------------------- send a message
def test_send_and_wait_for_the_reply(alices_default: AgentInstance, as_alice: APIClient, alice: Any) -> None:
    response = as_alice.post(f"{DEFAULT}messages/?wait=true", {"text": "Hello"}, format="json")
    assert response.status_code == 200
    turn = response.json()
    assert (turn["status"], turn["kind"], turn["error"]) == ("completed", "chat", "")
    assert [p["text"] for p in turn["reply"]["parts"] if p["type"] == "text"] == [ECHO + "Hello"]
    assert response["Location"] == turn["url"] == f"http://testserver{DEFAULT}turns/{turn['request_id']}/"
    assert Turn.objects.get(request_id=turn["request_id"]).user == alice
    messages = as_alice.get(f"{DEFAULT}messages/").json()
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1] == turn["reply"]


def test_send_without_waiting_answers_with_the_turn_to_follow(alices_default: AgentInstance,
                                                              as_alice: APIClient) -> None:
    response = as_alice.post(f"{DEFAULT}messages/", {"text": "Hello"}, format="json")
    assert response.status_code == 202
    followed = as_alice.get(response["Location"])
    assert followed.status_code == 200
    assert followed.json()["request_id"] == response.json()["request_id"]
    assert followed.json()["status"] == "completed"  # the eager worker ran it already
    assert followed.json()["reply"]["role"] == "assistant"


def test_staff_send_into_another_users_conversation(alices_default: AgentInstance, as_staff: APIClient,
                                                    as_alice: APIClient) -> None:
    response = as_staff.post(f"{DEFAULT}messages/?owner=alice&wait=true", {"text": "From staff"}, format="json")
    assert response.status_code == 200
    assert response.json()["url"].endswith("?owner=alice")
    assert Turn.objects.get().user.username == "sam"
    assert as_alice.get(f"{DEFAULT}messages/").json()[0]["parts"] == [{"type": "text", "text": "From staff"}]


@pytest.mark.parametrize(("who", "query", "body", "status"), [
    ("other", "?owner=alice", {"text": "hi"}, 403),
    ("owner", "", {}, 400), ("owner", "", {"text": ""}, 400), ("owner", "", {"text": "x" * 100_001}, 400),
    ("owner", "?wait=perhaps", {"text": "hi"}, 400),
])
def test_send_refuses(alices_default: AgentInstance, as_alice: APIClient, as_bob: APIClient, who: str, query: str,
                      body: dict[str, Any], status: int) -> None:
    client = {"owner": as_alice, "other": as_bob}[who]
    assert client.post(f"{DEFAULT}messages/{query}", body, format="json").status_code == status
    assert not Turn.objects.exists() and not ChatMessage.objects.exists()


async def test_a_message_sent_over_http_streams_to_the_open_chat(alices_default: AgentInstance,
                                                                 as_alice: APIClient, alice: Any) -> None:
    communicator, _, _ = await connect("/agents/demo-agent/default", alice)
    assert [(await communicator.receive_json_from())["type"] for _ in range(2)] == [
        "cf_agent_identity", "cf_agent_mcp_servers"]
    response = await sync_to_async(as_alice.post)(f"{DEFAULT}messages/", {"text": "over HTTP"}, format="json")
    frames = await receive_until(communicator, is_done(response.json()["request_id"]))
    assert text_of(frames) == ECHO + "over HTTP"
    await communicator.disconnect()


# --------------------------------------------------------------------------------------- turns
def test_a_turns_status(alices_default: AgentInstance, as_alice: APIClient, as_bob: APIClient) -> None:
    request_id = as_alice.post(f"{DEFAULT}messages/", {"text": "Hello"}, format="json").json()["request_id"]
    assert as_alice.get(f"{DEFAULT}turns/{request_id}/").json()["status"] == "completed"
    missing = as_alice.get(f"{DEFAULT}turns/nope/")
    assert (missing.status_code, missing.json()["detail"]) == (404, "There is no turn 'nope' in this conversation")
    assert as_bob.get(f"{DEFAULT}turns/{request_id}/").status_code == 404


def test_waiting_gives_up_after_the_timeout_and_says_where_the_turn_stands(alices_default: AgentInstance) -> None:
    """With no worker to run it, a queued turn is still queued when the wait ends (the API's 202)."""
    turn = Turn.objects.create(instance=alices_default, request_id="r-queued")
    with override_settings(AGENT_API_WAIT_TIMEOUT=0.2):
        assert conversations.wait(turn).status == Turn.Status.QUEUED
    assert conversations.reply_of(turn) is None
