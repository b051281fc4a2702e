"""The agents admin as staff read it: read-only pages, a transcript as messages, the decisions first."""

import uuid
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents_app import admin as agents_admin
from agents_app.demo.models import Refund
from agents_app.models import (
    AgentInstance,
    ApprovalDecision,
    ChatMessage,
    LedgerEntry,
    PendingApproval,
    RecoveryIncident,
    Turn,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(make_user: Any) -> Client:
    client = Client()
    client.force_login(make_user("root", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def instance(user: Any) -> AgentInstance:
    return AgentInstance.objects.create(slug="demo-agent", name="room-1", owner=user)


def rows_of_every_read_only_model(instance: AgentInstance) -> list[Any]:
    now = timezone.now()
    turn = Turn.objects.create(instance=instance, request_id="r1")
    pending = PendingApproval.objects.create(
        execution_id=f"actpause_{uuid.uuid4()}", instance=instance, agent="demo-agent", action_name="deploy_release",
        tool_call_id="t1", input={}, descriptor={}, created_at=now)
    decision = ApprovalDecision.objects.create(execution_id="actpause_x", instance=instance, action_name="deploy",
                                               decision="approved", descriptor={}, requested_at=now, decided_at=now)
    ledger = LedgerEntry.objects.create(scope=str(instance.pk), key="tool:t1", action_name="echo", input_hash="0",
                                        created_at=now, updated_at=now)
    refund = Refund.objects.create(order_id="A1", amount=1)
    incident = RecoveryIncident.objects.create(instance=instance, incident_id="r1:u1", root_request_id="r1",
                                               last_progress_at=now)
    return [instance, turn, pending, decision, ledger, refund, incident]


def admin_url(obj: Any, view: str, *args: Any) -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_{view}", args=args)


def test_every_agents_model_is_read_only_no_add_change_or_delete(root: Client, instance: AgentInstance) -> None:
    for obj in rows_of_every_read_only_model(instance):
        listing = root.get(admin_url(obj, "changelist")).content.decode()
        assert "delete_selected" not in listing, obj
        assert admin_url(obj, "add") not in listing, obj
        page = root.get(admin_url(obj, "change", quote(obj.pk))).content.decode()
        assert "deletelink" not in page and 'name="_save"' not in page, obj
        assert root.get(admin_url(obj, "delete", quote(obj.pk))).status_code == 403, obj
        assert type(obj).objects.filter(pk=obj.pk).exists()


def message(instance: AgentInstance, position: int, data: dict[str, Any]) -> None:
    ChatMessage.objects.create(instance=instance, message_id=data["id"], role=data["role"], position=position,
                               data=data)


def test_the_instance_page_shows_the_transcript_as_messages_and_marks_compacted_parts(
    root: Client, instance: AgentInstance
) -> None:
    message(instance, 0, {"id": "m0", "role": "user", "parts": [{"type": "text", "text": "weather in <Oslo>?"}]})
    message(instance, 1, {"id": "m1", "role": "assistant", "metadata": {
        "compactedToolOutputs": ["call_1"], "compactedTextParts": [3]}, "parts": [
        {"type": "step-start"},
        {"type": "tool-get_weather", "toolCallId": "call_1", "state": "output-available", "input": {"city": "Oslo"},
         "output": "Oslo: snow… [truncated]"},
        {"type": "text", "text": "It snows."},
        {"type": "text", "text": "A long story… [truncated]"},
    ]})
    response = root.get(admin_url(instance, "change", instance.pk))
    html = response.content.decode()
    assert "Transcript (2 messages)" in html
    assert [[part["kind"] for part in m["parts"]] for m in response.context["conversation"]] == [
        ["text"], ["tool", "text", "text"]]
    assert "weather in &lt;Oslo&gt;?" in html
    assert 'data-tool="get_weather" data-state="output-available"' in html
    assert "&quot;city&quot;: &quot;Oslo&quot;" in html
    # One marker on the tool's output, one on the cut text; none on the whole text.
    assert html.count("compacted for storage") == 2
    tool, whole, cut = response.context["conversation"][1]["parts"]
    assert (tool["compacted"], whole["compacted"], cut["compacted"]) == (True, False, True)
    # Not the stored JSON: no "parts" arrays, no message ids as JSON keys.
    assert "&quot;parts&quot;" not in html


def test_a_long_transcript_shows_its_end(root: Client, instance: AgentInstance, monkeypatch: Any) -> None:
    monkeypatch.setattr(agents_admin, "TRANSCRIPT_MESSAGES", 3)
    for i in range(5):
        message(instance, i, {"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"n{i}"}]})
    response = root.get(admin_url(instance, "change", instance.pk))
    assert "the last 3 of 5 messages" in response.content.decode()
    assert [m["parts"][0]["text"] for m in response.context["conversation"]] == ["n2", "n3", "n4"]


@pytest.mark.parametrize(("slug", "owner", "query"), [
    ("demo-agent", "alice", "?owner=alice"), ("demo-agent", None, "?owner="), ("shared-room-agent", None, ""),
])
def test_the_instance_page_opens_the_conversation_at_the_staff_address(
    root: Client, user: Any, slug: str, owner: str | None, query: str
) -> None:
    instance = AgentInstance.objects.create(slug=slug, name="room", owner=user if owner else None)
    html = root.get(admin_url(instance, "change", instance.pk)).content.decode()
    assert f"href='/chat/{slug}/room/{query}' id='open-in-chat'" in html


def test_the_decisions_come_before_the_details_of_a_pending_call(make_user: Any, instance: AgentInstance) -> None:
    row = rows_of_every_read_only_model(instance)[2]
    client = Client()
    client.force_login(make_user("root", is_staff=True, is_superuser=True))
    html = client.get(admin_url(row, "change", quote(row.pk))).content.decode()
    assert html.index('id="approve-form"') < html.index('id="reject-form"') < html.index("<fieldset")


def test_a_turns_recovery_incident_shows_its_attempts(root: Client, instance: AgentInstance) -> None:
    """What staff see of a turn cut by a crash: the incident, its budget and reason, and its turns."""
    now = timezone.now()
    incident = RecoveryIncident.objects.create(
        instance=instance, incident_id="r1:u1", root_request_id="r1", status="exhausted", kind="continue",
        attempt=3, attempts_total=3, work=12, reason="max_attempts_exceeded", last_progress_at=now, finished_at=now)
    Turn.objects.create(instance=instance, request_id="r1", status="aborted", incident=incident,
                        error="Interrupted: the process running this turn stopped")
    Turn.objects.create(instance=instance, request_id="a1", kind="recovery", status="error", incident=incident)
    listing = root.get(admin_url(Turn(), "changelist")).content.decode()
    assert f"href='{admin_url(incident, 'change', incident.pk)}'>exhausted</a>" in listing
    page = root.get(admin_url(incident, "change", incident.pk)).content.decode()
    assert "max_attempts_exceeded" in page
    assert "a1" in page and "Interrupted: the process running this turn stopped" in page
