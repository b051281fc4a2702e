"""The REST API of scheduled prompts, with and without ``manage_schedules``, and its OpenAPI schema."""

import itertools
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from agents_app import transcript
from agents_app.models import AgentInstance, Schedule, ScheduleRun
from agents_app.schedules import language as dsl
from tests.agents import ScheduledAgent

LIST = "/api/schedules/"
BODY = {"name": "daily-report", "agent": "demo-agent", "instance": "shop-1", "prompt": "Generate the daily report.",
        "schedule": "every day at 09:00 in Europe/Oslo"}


@pytest.fixture
def operator(make_user: Callable[..., Any]) -> Any:
    user = make_user("operator")
    user.user_permissions.add(Permission.objects.get(codename="manage_schedules", content_type__app_label="agents_app"))
    return user


@pytest.fixture
def api(operator: Any) -> APIClient:
    client = APIClient()
    assert client.login(username="operator", password="pw")
    return client


def detail(pk: int) -> str:
    return f"{LIST}{pk}/"


@pytest.mark.django_db
def test_without_the_permission_403_explains_and_nothing_changes(make_user):
    make_user("bob")
    client = APIClient()
    assert client.login(username="bob", password="pw")
    for method, path, body in (("get", LIST, None), ("post", LIST, BODY)):
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code == 403
        assert "agents_app.manage_schedules" in response.json()["detail"]
    assert APIClient().get(LIST).status_code == 401
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_create_list_update_delete(api, operator):
    response = api.post(LIST, BODY, format="json")
    assert response.status_code == 201, response.json()
    created = response.json()
    row = Schedule.objects.select_related("instance").get()
    assert created == {
        "id": row.pk, "name": "daily-report", "agent": "demo-agent", "instance": "shop-1",
        "prompt": "Generate the daily report.", "schedule": "every day at 09:00 in Europe/Oslo", "timezone": "",
        "enabled": True, "source": "operator", "next_run_at": created["next_run_at"], "last_run": None,
        "consecutive_failures": 0, "created_at": created["created_at"], "updated_at": created["updated_at"],
    }
    assert row.instance.owner is None and row.next_run_at.astimezone(dsl.ZoneInfo("Europe/Oslo")).hour == 9
    assert [s["name"] for s in api.get(LIST).json()["results"]] == ["daily-report"]

    next_run = row.next_run_at
    assert api.patch(detail(row.pk), {"prompt": "Briefly."}, format="json").status_code == 200
    row.refresh_from_db()
    assert (row.prompt, row.next_run_at) == ("Briefly.", next_run)
    moved = api.patch(detail(row.pk), {"schedule": "every 15 minutes"}, format="json")
    assert moved.status_code == 200 and moved.json()["next_run_at"] != created["next_run_at"]
    assert api.patch(detail(row.pk), {"enabled": False}, format="json").json()["enabled"] is False
    assert api.delete(detail(row.pk)).status_code == 204
    assert not Schedule.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("changes", "errors"), [
    ({"schedule": "evry day at 09:00"}, {"schedule": [
        'Could not read "evry day at 09:00": "evry" is not understood (did you mean "every"?). Try "every day at '
        '09:00" or "every monday at 9am in Europe/Oslo".']}),
    # The expression is read before the zone: a typo in both is two errors, each on its field.
    ({"schedule": "every dya at 09:00", "timezone": "europe/olso"}, {
        "schedule": ['Could not read "every dya at 09:00": "dya" is not understood (expected a number, "minute", '
                     '"hour", "day", "weekday", "weekend" or a day of the week). Try "every day at 09:00" or '
                     '"every monday at 9am in Europe/Oslo".'],
        "timezone": ['Invalid timezone "europe/olso"; did you mean "Europe/Oslo"?']}),
    ({"schedule": "every day at 09:00"},
     {"schedule": ['Wall-clock schedule "every day at 09:00" requires a timezone or get_default_timezone(): add '
                   'one, e.g. "every day at 09:00 in Europe/Oslo"']}),
    ({"agent": "nope"}, {"agent": ['"nope" is not a valid choice.']}),
    ({"instance": "two words"}, {"instance": ["Invalid instance name 'two words': no slash or space, at most 200 "
                                              "characters"]}),
    ({"timezone": "Mars/Olympus"}, {"timezone": ['Invalid timezone "Mars/Olympus"']}),
    ({"prompt": ""}, {"prompt": ["This field may not be blank."]}),
])
def test_a_bad_schedule_or_agent_is_a_400_on_its_field(api, changes, errors):
    response = api.post(LIST, {**BODY, **changes}, format="json")
    assert (response.status_code, response.json()) == (400, errors)
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_preview_says_what_a_schedule_means_and_its_next_three_runs_and_saves_nothing(api):
    body = {"agent": "demo-agent", "instance": "shop-1", "schedule": "every monday at 9am", "timezone": "Europe/Oslo"}
    response = api.post(f"{LIST}preview/", body, format="json")
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert (answer["schedule"], answer["timezone"], answer["kind"]) == ("every monday at 09:00", "Europe/Oslo",
                                                                        "wall-clock")
    runs = [datetime.fromisoformat(moment).astimezone(dsl.ZoneInfo("Europe/Oslo")) for moment in answer["next_runs"]]
    assert [(moment.weekday(), moment.strftime("%H:%M")) for moment in runs] == [(0, "09:00")] * 3
    assert [(b - a).days for a, b in itertools.pairwise(runs)] == [7, 7]
    refused = api.post(f"{LIST}preview/", {**body, "schedule": "every monday at 9", "timezone": "Mars/Olympus"},
                       format="json")
    assert refused.status_code == 400
    assert set(refused.json()) == {"schedule", "timezone"}
    assert not Schedule.objects.exists() and not AgentInstance.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_run_now_runs_the_prompt_as_a_scheduled_turn(api, operator):
    pk = api.post(LIST, BODY, format="json").json()["id"]
    response = api.post(f"{detail(pk)}run/")
    assert response.status_code == 202
    run = ScheduleRun.objects.get()
    assert response.json() == {
        "id": run.pk, "occurrence_key": run.occurrence_key, "scheduled_for": response.json()["scheduled_for"],
        "trigger": "manual", "status": "completed", "request_id": run.request_id, "error": "",
        "claimed_at": response.json()["claimed_at"], "started_at": response.json()["started_at"],
        "finished_at": response.json()["finished_at"],
    }
    prompt, _reply = transcript.load(AgentInstance.objects.get(name="shop-1"))
    assert prompt["metadata"]["source"] == "schedule"
    assert api.get(detail(pk)).json()["last_run"]["status"] == "completed"
    assert api.post(f"{LIST}9999/run/").status_code == 404


@pytest.mark.django_db
def test_a_schedule_declared_in_code_may_only_be_switched_on_and_off(api):
    ScheduledAgent.TASKS = {"digest": {"schedule": "every 2 hours", "prompt": "Digest?"}}
    try:
        AgentInstance.objects.create(slug="scheduled-agent", name="coded")
    finally:
        ScheduledAgent.TASKS = {}
    row = Schedule.objects.get()
    assert api.get(detail(row.pk)).json()["source"] == "code"
    refused = api.patch(detail(row.pk), {"prompt": "other"}, format="json")
    assert refused.status_code == 409
    assert api.delete(detail(row.pk)).status_code == 409
    assert api.patch(detail(row.pk), {"enabled": False}, format="json").json()["enabled"] is False
    assert Schedule.objects.get().prompt == "Digest?"


@pytest.mark.django_db
def test_a_users_own_conversation_of_the_same_name_is_not_touched(api, make_user):
    private = AgentInstance.objects.create(slug="demo-agent", name="private", owner=make_user("carol"))
    response = api.post(LIST, {**BODY, "instance": "private"}, format="json")
    assert response.status_code == 201
    # Scheduled prompts run in the global namespace: carol's "private" is someone else.
    assert Schedule.objects.get().instance.owner is None
    assert not Schedule.objects.filter(instance=private).exists()


@pytest.mark.django_db
def test_the_schema_documents_the_endpoints(api):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert {"/api/schedules/", "/api/schedules/{id}/", "/api/schedules/{id}/run/",
            "/api/schedules/preview/"} <= set(schema["paths"])
    assert set(schema["paths"]["/api/schedules/{id}/"]) >= {"get", "put", "patch", "delete"}
    assert schema["paths"]["/api/schedules/{id}/run/"]["post"]["operationId"] == "schedules_run"
    assert "demo-agent" in schema["components"]["schemas"]["AgentEnum"]["enum"]
