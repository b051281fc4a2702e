"""The REST API: pending approvals (list, filters, retrieve, approve, reject), transcripts, schema.

List and permission tests create ``PendingApproval`` rows directly; the decision tests park a
real call through the demo agent and decide it through the API, end to end.
"""

import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents_app import events
from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance, ApprovalDecision, ChatMessage, LedgerEntry, PendingApproval

DEPLOY = '/tool deploy_release {"version": "1.4.2"}'
DEPLOYED = "Deployed 1.4.2 to production."
# What the demo model says once the approved call's output is in (the continuation turn).
CONTINUED = DEPLOYED
LIST = "/api/approvals/"
START = timezone.now() - timedelta(days=1)


# --------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def approver(make_user: Callable[..., Any]) -> Any:
    user = make_user("approver")
    user.user_permissions.add(Permission.objects.get(codename="approve_action", content_type__app_label="agents_app"))
    return user


@pytest.fixture
def api(approver: Any) -> APIClient:
    """An API client logged in as the approver through the session (the real login, not force_login)."""
    client = APIClient()
    assert client.login(username="approver", password="pw")
    return client


def instance_of(owner: Any, name: str = "ops", slug: str = "demo-agent") -> AgentInstance:
    return AgentInstance.objects.get_or_create(slug=slug, name=name, defaults={"owner": owner})[0]


def park(instance: AgentInstance, minute: int, *, action: str = "deploy_release", risk: str = "high",
         requested_by: Any = None) -> PendingApproval:
    """A pending row as the service parks it, ``minute`` minutes after START."""
    execution_id = f"actpause_{uuid.uuid4()}"
    descriptor = {"requestId": "r1", "toolCallId": f"tc{minute}", "action": action, "summary": f"{action} #{minute}",
                  "input": {"n": minute}, "permissions": ["deploy:run"], "kind": "durable-pause",
                  **({"risk": risk} if risk else {})}
    return PendingApproval.objects.create(
        execution_id=execution_id, instance=instance, agent=instance.slug,
        action_name=action, tool_call_id=f"tc{minute}",
        request_id="r1", input={"n": minute}, descriptor=descriptor, risk=risk, summary=descriptor["summary"],
        requested_by=requested_by, created_at=START + timedelta(minutes=minute),
    )


def ids(response: Any) -> list[str]:
    return [row["execution_id"] for row in response.json()["results"]]


# --------------------------------------------------------------------------------------- authentication
@pytest.mark.parametrize(("method", "path"), [
    ("get", LIST), ("get", f"{LIST}actpause_x/"), ("post", f"{LIST}actpause_x/approve/"),
    ("post", f"{LIST}actpause_x/reject/"), ("get", "/api/agents/demo-agent/ops/messages/"),
])
def test_anonymous_gets_401_with_a_token_challenge(db: None, method: str, path: str) -> None:
    response = getattr(APIClient(), method)(path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_token_authentication(approver: Any) -> None:
    row = park(instance_of(approver), 0)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=approver).key}")
    assert ids(client.get(LIST)) == [row.execution_id]
    client.credentials(HTTP_AUTHORIZATION="Token not-a-key")
    assert client.get(LIST).status_code == 401


@pytest.mark.parametrize(("method", "path"), [
    ("get", LIST), ("get", "{}"), ("post", "{}approve/"), ("post", "{}reject/"),
])
def test_without_the_permission_403_explains_and_nothing_is_decided(
    make_user: Callable[..., Any], method: str, path: str
) -> None:
    user = make_user("bob", is_staff=True)  # staff alone is not enough
    row = park(instance_of(user), 0)
    client = APIClient()
    client.force_authenticate(user)
    response = getattr(client, method)(path.format(f"{LIST}{row.execution_id}/"))
    assert response.status_code == 403
    assert '"agents_app.approve_action" permission' in response.json()["detail"]
    assert PendingApproval.objects.filter(pk=row.pk).exists()


def test_a_superuser_may_approve_without_the_explicit_permission(make_user: Callable[..., Any]) -> None:
    root = make_user("root", is_superuser=True)
    client = APIClient()
    client.force_authenticate(root)
    assert client.get(LIST).status_code == 200


# --------------------------------------------------------------------------------------- list, filters, retrieve
def test_list_fields_of_a_row(api: APIClient, approver: Any, make_user: Callable[..., Any]) -> None:
    requester = make_user("carol")
    row = park(instance_of(make_user("dave")), 3, requested_by=requester)
    [item] = api.get(LIST).json()["results"]
    assert item == {
        "execution_id": row.execution_id, "agent": "demo-agent", "instance": "ops", "owner": "dave",
        "action": "deploy_release", "summary": "deploy_release #3", "risk": "high", "input": {"n": 3},
        "permissions": ["deploy:run"], "descriptor": row.descriptor, "requested_by": "carol",
        "created_at": item["created_at"],
    }
    assert item["created_at"].startswith((START + timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M"))


def test_list_is_oldest_first_in_fixed_pages(api: APIClient, approver: Any) -> None:
    instance = instance_of(approver)
    # Created out of order, and with two rows at the same instant on the page boundary.
    rows = [park(instance, minute) for minute in [*range(59, 0, -1), 50]]
    expected = [r.execution_id for r in sorted(rows, key=lambda r: (r.created_at, r.execution_id))]
    first = api.get(LIST).json()
    assert len(first["results"]) == 50
    assert first["previous"] is None
    second = api.get(first["next"]).json()
    assert second["next"] is None
    assert [r["execution_id"] for r in first["results"] + second["results"]] == expected


def test_filters(api: APIClient, approver: Any, make_user: Callable[..., Any]) -> None:
    mine, theirs = instance_of(approver), instance_of(make_user("erin"), slug="tool-agent")
    deploy = park(mine, 0)
    refund = park(mine, 1, action="refund_order", risk="low")
    quiet = park(theirs, 2, risk="")
    assert ids(api.get(LIST, {"risk": "high"})) == [deploy.execution_id]
    assert ids(api.get(LIST, {"action": "refund_order"})) == [refund.execution_id]
    assert ids(api.get(LIST, {"agent": "tool-agent"})) == [quiet.execution_id]
    assert ids(api.get(LIST, {"agent": "demo-agent", "risk": "low"})) == [refund.execution_id]
    assert ids(api.get(LIST, {"agent": "nobody"})) == []
    assert api.get(LIST).json()["results"][2]["risk"] == ""
    bad = api.get(LIST, {"risk": "extreme"})
    assert bad.status_code == 400
    assert bad.json() == {"risk": ['"extreme" is not a valid choice.']}


def test_retrieve(api: APIClient, approver: Any) -> None:
    row = park(instance_of(approver), 0)
    response = api.get(f"{LIST}{row.execution_id}/")
    assert response.status_code == 200
    assert response.json()["execution_id"] == row.execution_id
    assert api.get(f"{LIST}actpause_gone/").status_code == 404


@pytest.mark.parametrize("rows", [3, 50])
def test_list_query_count_does_not_grow_with_the_page(
    api: APIClient, make_user: Callable[..., Any], django_assert_max_num_queries: Any, rows: int
) -> None:
    """session + user + the permission check (user, group) + one page query, whatever the rows."""
    for n in range(rows):  # every row its own instance, owner and requester
        park(instance_of(make_user(f"owner{n}"), name=f"i{n}"), n, requested_by=make_user(f"req{n}"))
    with django_assert_max_num_queries(5):
        assert len(api.get(LIST).json()["results"]) == rows


# --------------------------------------------------------------------------------------- transcript
@pytest.fixture
def transcript_owner(make_user: Callable[..., Any]) -> Any:
    owner = make_user("olivia")
    instance = instance_of(owner, name="notes")
    for position, text in enumerate(["first", "second"]):
        message = {"id": f"m{position}", "role": "user", "parts": [{"type": "text", "text": text}]}
        ChatMessage.objects.create(instance=instance, message_id=f"m{position}", role="user", position=position,
                                   data=message)
    return owner


@pytest.mark.parametrize(("who", "query", "status"), [
    ("owner", "", 200), ("owner", "?owner=olivia", 200), ("staff", "?owner=olivia", 200),
    ("staff", "", 404), ("other", "", 404), ("other", "?owner=olivia", 403),
])
def test_messages_owner_staff_other(
    transcript_owner: Any, make_user: Callable[..., Any], who: str, query: str, status: int
) -> None:
    """A name is read in the caller's namespace; only staff read another's, with ``?owner=``."""
    user = {"owner": transcript_owner, "staff": make_user("sam", is_staff=True), "other": make_user("oscar")}[who]
    client = APIClient()
    client.force_authenticate(user)
    response = client.get(f"/api/agents/demo-agent/notes/messages/{query}")
    assert response.status_code == status
    if status == 200:
        assert [m["parts"][0]["text"] for m in response.json()] == ["first", "second"]
    elif status == 403:
        assert response.json() == {"detail": "Only staff may open another user's conversation"}
    else:
        assert response.json() == {"detail": f"There is no conversation demo-agent/notes of {user.username}"}


def test_messages_of_a_shared_agent_are_open_to_every_user(make_user: Callable[..., Any]) -> None:
    """A shared class has one global namespace: every user reads the same instance."""
    AgentInstance.objects.create(slug="shared-room-agent", name="lobby", owner=None)
    client = APIClient()
    client.force_authenticate(make_user("oscar"))
    assert client.get("/api/agents/shared-room-agent/lobby/messages/").json() == []


@pytest.mark.parametrize("path", [
    "/api/agents/demo-agent/nobody/messages/", "/api/agents/no-such-agent/notes/messages/",
    "/api/agents/demo-agent/notes/messages/?owner=nobody",
])
def test_messages_of_an_unknown_agent_instance_or_owner_is_404_and_creates_nothing(
    transcript_owner: Any, make_user: Callable[..., Any], path: str
) -> None:
    client = APIClient()
    client.force_authenticate(make_user("sam", is_staff=True) if "owner=" in path else transcript_owner)
    assert client.get(path).status_code == 404
    assert AgentInstance.objects.count() == 1


# --------------------------------------------------------------------------------------- schema
def test_schema_has_every_path(api: APIClient) -> None:
    response = api.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    assert {
        "/api/approvals/", "/api/approvals/{execution_id}/", "/api/approvals/{execution_id}/approve/",
        "/api/approvals/{execution_id}/reject/", "/api/agents/{slug}/{name}/messages/",
    } <= set(response.json()["paths"])
    assert api.get("/api/docs/").status_code == 200


def test_schema_validates_without_warnings(tmp_path: Any) -> None:
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))


# --------------------------------------------------------------------------------------- deciding, end to end
# The demo agent parks a real call in a programmatic turn; the API decides it through the service,
# which runs on other threads (database_sync_to_async), hence transactional tests. Continuation
# turns run inline (test settings).

def parked_deploy(owner: Any, name: str = "deploy-room") -> PendingApproval:
    agent = async_to_sync(DemoAgent.aget)(name, owner=owner)
    assert async_to_sync(agent.save_messages)([DEPLOY]).status == "completed"
    return PendingApproval.objects.get(instance=agent.instance)


def transcript_as(owner: Any, name: str = "deploy-room") -> list[dict[str, Any]]:
    client = APIClient()
    client.force_authenticate(owner)
    response = client.get(f"/api/agents/demo-agent/{name}/messages/")
    assert response.status_code == 200
    return response.json()


def deploy_part(messages: list[dict[str, Any]]) -> dict[str, Any]:
    [reply] = [m for m in messages if m["role"] == "assistant"]
    return next(p for p in reply["parts"] if p["type"] == "tool-deploy_release")


def last_text(messages: list[dict[str, Any]]) -> str:
    [reply] = [m for m in messages if m["role"] == "assistant"]
    return [p["text"] for p in reply["parts"] if p["type"] == "text"][-1]


def not_pending(execution_id: str) -> dict[str, str]:
    error = f'Execution "{execution_id}" is no longer pending — it was approved or rejected elsewhere.'
    return {"execution_id": execution_id, "status": "error", "error": error}


@pytest.fixture
def approvals_run() -> Iterator[list[str]]:
    """The execution ids of the approved calls that ran, from the ``action:pause:approved`` event."""
    ran: list[str] = []

    def record(name: str, data: dict[str, Any]) -> None:
        if name == events.PAUSE_APPROVED:
            ran.append(data["executionId"])

    unsubscribe = events.subscribe(record)
    yield ran
    unsubscribe()


@pytest.mark.django_db(transaction=True)
def test_approve_runs_the_action_once_and_the_conversation_goes_on(
    api: APIClient, approver: Any, user: Any, approvals_run: list[str]
) -> None:
    pending = parked_deploy(user)
    [item] = api.get(LIST).json()["results"]
    assert {k: item[k] for k in ("execution_id", "agent", "instance", "owner", "action", "summary", "risk",
                                 "input", "permissions", "requested_by")} == {
        "execution_id": pending.pk, "agent": "demo-agent", "instance": "deploy-room", "owner": "alice",
        "action": "deploy_release", "summary": "Deploy a release", "risk": "high",
        "input": {"version": "1.4.2", "environment": "production"}, "permissions": ["deploy:run"],
        "requested_by": "alice",
    }
    assert deploy_part(transcript_as(user))["output"]["status"] == "paused"

    response = api.post(f"{LIST}{pending.pk}/approve/")
    assert (response.status_code, response.json()) == (
        200, {"execution_id": pending.pk, "status": "approved", "result": DEPLOYED}
    )
    assert api.get(LIST).json()["results"] == []
    decision = ApprovalDecision.objects.get(execution_id=pending.pk)
    assert (decision.decision, decision.decided_by, decision.result) == ("approved", approver, DEPLOYED)
    messages = transcript_as(user)
    assert deploy_part(messages)["output"] == DEPLOYED
    assert last_text(messages).startswith(CONTINUED)

    again = api.post(f"{LIST}{pending.pk}/approve/")
    assert (again.status_code, again.json()) == (409, not_pending(pending.pk))
    assert approvals_run == [pending.pk]
    assert LedgerEntry.objects.filter(tool_call_id=pending.tool_call_id).count() == 1
    assert ApprovalDecision.objects.count() == 1
    assert transcript_as(user) == messages


@pytest.mark.django_db(transaction=True)
def test_reject_with_a_reason_by_token_then_every_decision_is_409(approver: Any, user: Any) -> None:
    pending = parked_deploy(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=approver).key}")
    response = client.post(f"{LIST}{pending.pk}/reject/", {"reason": "  Not on a Friday "}, format="json")
    rejected = {"status": "rejected", "executionId": pending.pk, "action": "deploy_release",
                "reason": "Not on a Friday"}
    assert (response.status_code, response.json()) == (
        200, {"execution_id": pending.pk, "status": "rejected", "result": rejected}
    )
    decision = ApprovalDecision.objects.get(execution_id=pending.pk)
    assert (decision.decision, decision.reason, decision.decided_by) == ("rejected", "Not on a Friday", approver)
    messages = transcript_as(user)
    assert deploy_part(messages)["output"] == rejected
    assert last_text(messages) == "Staff rejected deploy_release: Not on a Friday."
    for verb in ("reject", "approve"):
        again = client.post(f"{LIST}{pending.pk}/{verb}/", {"reason": "twice"}, format="json")
        assert (again.status_code, again.json()) == (409, not_pending(pending.pk))


@pytest.mark.django_db(transaction=True)
def test_reject_without_a_body_gives_the_default_reason(api: APIClient, user: Any) -> None:
    pending = parked_deploy(user)
    response = api.post(f"{LIST}{pending.pk}/reject/")
    assert response.status_code == 200
    assert response.json()["result"]["reason"] == "Rejected by user"


@pytest.mark.django_db(transaction=True)
def test_an_id_that_never_existed_is_409_like_a_decided_one(api: APIClient) -> None:
    """By design: rows exist only while pending, so "never parked" and "decided" look the same."""
    for verb in ("approve", "reject"):
        response = api.post(f"{LIST}actpause_never/{verb}/")
        assert (response.status_code, response.json()) == (409, not_pending("actpause_never"))
    assert not ApprovalDecision.objects.exists()
