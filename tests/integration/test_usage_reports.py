"""Usage reports over HTTP: the admin's usage page (totals, chart, by user and agent, who hit a
limit), the per-user quota page, and ``GET /api/usage/`` (docs/operations.md#usage-and-quotas)."""

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agents_app.models import AgentInstance, Turn, TurnUsage, UsageQuota
from agents_app.usage import service

pytestmark = pytest.mark.django_db

TODAY = service.today()
YESTERDAY = TODAY - datetime.timedelta(days=1)


@pytest.fixture
def people(make_user: Any) -> dict[str, Any]:
    return {
        "alice": make_user("alice"),
        "bob": make_user("bob"),
        "root": make_user("root", is_staff=True, is_superuser=True),
    }


@pytest.fixture
def usage(people: dict[str, Any]) -> list[TurnUsage]:
    """Alice: two turns today and one yesterday, one refused; Bob: one turn on another agent."""
    rows = []
    for n, (who, agent, day, tokens, limit) in enumerate(
        [
            ("alice", "demo-agent", TODAY, (100, 20), ""),
            ("alice", "demo-agent", TODAY, (0, 0), "user per day"),
            ("alice", "demo-agent", YESTERDAY, (50, 10), ""),
            ("bob", "research-agent", TODAY, (300, 40), ""),
        ]
    ):
        instance, _ = AgentInstance.objects.get_or_create(slug=agent, name="room", owner=people[who])
        turn = Turn.objects.create(instance=instance, request_id=f"r{n}", user=people[who])
        rows.append(
            TurnUsage.objects.create(
                turn=turn,
                agent=agent,
                user=people[who],
                day=day,
                model="gpt-test",
                requests=0 if limit else 1,
                input_tokens=tokens[0],
                output_tokens=tokens[1],
                cost=None if limit else Decimal("0.5"),
                limit=limit,
            )
        )
    return rows


def api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_user_sees_their_own_usage_by_day(people: dict[str, Any], usage: list[TurnUsage]) -> None:
    report = api(people["alice"]).get("/api/usage/").json()

    assert report["since"] == str(TODAY - datetime.timedelta(days=29)) and report["until"] == str(TODAY)
    assert report["totals"] == {
        "turns": 3,
        "requests": 2,
        "input_tokens": 150,
        "output_tokens": 30,
        "total_tokens": 180,
        "cost": "1.000000",
        "refused": 1,
    }
    assert [(g["key"], g["total_tokens"], g["refused"]) for g in report["groups"]] == [
        (str(YESTERDAY), 60, 0),
        (str(TODAY), 120, 1),
    ]
    forbidden = api(people["alice"]).get("/api/usage/", {"user": "bob"})
    assert forbidden.status_code == 403


def test_staff_see_everyone_grouped_by_user_or_agent(people: dict[str, Any], usage: list[TurnUsage]) -> None:
    root = api(people["root"])
    by_user = root.get("/api/usage/", {"group_by": "user"}).json()
    assert [(g["key"], g["total_tokens"]) for g in by_user["groups"]] == [("bob", 340), ("alice", 180)]
    assert by_user["totals"]["total_tokens"] == 520
    by_agent = root.get("/api/usage/", {"group_by": "agent", "since": str(TODAY)}).json()
    assert [(g["key"], g["turns"]) for g in by_agent["groups"]] == [("research-agent", 1), ("demo-agent", 2)]
    only_bob = root.get("/api/usage/", {"user": "bob"}).json()
    assert only_bob["totals"]["turns"] == 1
    assert root.get("/api/usage/", {"user": "nobody"}).status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        {"since": "yesterday"},
        {"since": str(TODAY), "until": str(YESTERDAY)},
        {"since": "2020-01-01", "until": "2022-01-01"},
        {"group_by": "hour"},
    ],
)
def test_a_bad_query_is_a_400_that_says_why(people: dict[str, Any], query: dict[str, str]) -> None:
    response = api(people["alice"]).get("/api/usage/", query)
    assert response.status_code == 400
    assert set(response.json()) <= {"since", "until", "group_by"}


def test_anonymous_callers_are_asked_to_log_in() -> None:
    assert APIClient().get("/api/usage/").status_code == 401


def test_the_admin_shows_totals_a_chart_and_who_hit_a_limit(people: dict[str, Any], usage: list[TurnUsage]) -> None:
    client = Client()
    client.force_login(people["root"])
    url = reverse("admin:agents_app_turnusage_changelist")

    page = client.get(url)
    html = page.content.decode()
    assert page.status_code == 200
    assert page.context["usage_totals"]["total_tokens"] == 520
    assert '<svg class="usage-chart"' in html and html.count("<rect ") == 4  # two days, input and output each
    assert f"{TODAY}: 400 in + 60 out, 3 turns" in html
    assert [g["key"] for g in page.context["usage_by_user"]] == ["bob", "alice"]
    assert [g["key"] for g in page.context["usage_by_agent"]] == ["research-agent", "demo-agent"]

    refused = client.get(url, {"refused": "yes"})
    assert [(row.user.username, row.limit) for row in refused.context["cl"].result_list] == [("alice", "user per day")]
    assert refused.context["usage_totals"]["refused"] == 1
    # The report follows the list's filters.
    assert client.get(url, {"agent": "demo-agent"}).context["usage_totals"]["total_tokens"] == 180


def test_staff_set_a_users_quota_in_the_admin(people: dict[str, Any]) -> None:
    client = Client()
    client.force_login(people["root"])
    response = client.post(
        reverse("admin:agents_app_usagequota_add"),
        {"user": people["alice"].pk, "tokens_per_day": "1000", "tokens_per_month": ""},
    )
    assert response.status_code == 302
    quota = UsageQuota.objects.get(user=people["alice"])
    assert (quota.tokens_per_day, quota.tokens_per_month) == (1000, None)


def test_the_chart_leaves_days_without_usage_empty(people: dict[str, Any], usage: list[TurnUsage]) -> None:
    TurnUsage.objects.filter(day=YESTERDAY).update(day=TODAY - datetime.timedelta(days=3))
    client = Client()
    client.force_login(people["root"])
    html = client.get(reverse("admin:agents_app_turnusage_changelist")).content.decode()
    assert html.count("<rect ") == 8  # four days, two of them empty
    assert f"{TODAY - datetime.timedelta(days=1)}: 0 in + 0 out, 0 turns" in html


def test_usage_outlives_a_deleted_conversation_and_still_counts(
    people: dict[str, Any], usage: list[TurnUsage], settings: Any
) -> None:
    AgentInstance.objects.filter(owner=people["alice"]).delete()

    assert TurnUsage.objects.filter(user=people["alice"], turn=None).count() == 3
    settings.AGENT_USAGE_QUOTAS = {"user_per_day": 120}
    refused = service.refusal(people["alice"], "demo-agent")
    assert refused is not None and refused.limit == "user per day"
    client = Client()
    client.force_login(people["root"])
    assert "(conversation deleted)" in client.get(reverse("admin:agents_app_turnusage_changelist")).content.decode()
