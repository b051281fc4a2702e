"""The approvals admin through Django's test client: the queue, its detail page, the decisions.

Listing, filtering, permissions and query budgets use ``PendingApproval`` rows made here; the
decisions (buttons and bulk actions) run the real thing end to end: the demo agent parks a
``deploy_release`` call in a programmatic turn, the admin approves or rejects it through
``approvals``, and the transcript, the audit log and the continuation show the result.
"""

import html
import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents_app.approvals import service as approvals
from agents_app.approvals.admin import INPUT_SUMMARY_CHARS
from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance, ApprovalDecision, ChatMessage, LedgerEntry, PendingApproval, Turn

LIST = reverse("admin:agents_app_pendingapproval_changelist")
DEPLOY = '/tool deploy_release {"version": "1.4.2"}'
DEPLOYED = "Deployed 1.4.2 to production."
# What the demo model says once the approved call's output is in (the continuation turn).
CONTINUED = DEPLOYED
NO_LONGER_PENDING = "is no longer pending"


def detail_url(execution_id: str) -> str:
    return reverse("admin:agents_app_pendingapproval_change", args=[quote(execution_id)])


def decide_url(execution_id: str, verb: str) -> str:
    return reverse(f"admin:agents_app_pendingapproval_{verb}", args=[quote(execution_id)])


def grant(user: Any, codename: str) -> Any:
    user.user_permissions.add(Permission.objects.get(codename=codename, content_type__app_label="agents_app"))
    return user


@pytest.fixture
def approver(make_user: Any) -> Any:
    """A staff user (not a superuser) allowed to approve."""
    return grant(make_user("approver", is_staff=True), "approve_action")


@pytest.fixture
def staff(make_user: Any) -> Any:
    """A staff user without the approve_action permission."""
    return make_user("staffer", is_staff=True)


@pytest.fixture
def approver_client(approver: Any) -> Client:
    client = Client()
    client.force_login(approver)
    return client


@pytest.fixture
def instance(user: Any) -> AgentInstance:
    return AgentInstance.objects.create(slug="demo-agent", name="room-1", owner=user)


def park(instance: AgentInstance, action: str = "deploy_release", *, risk: str = "high",
         summary: str = "Deploy a release", age: timedelta = timedelta(0), requested_by: Any = None,
         tool_call_id: str = "call_1", **input: Any) -> PendingApproval:
    """A pending row as ``approvals`` parks it (for tests that decide nothing)."""
    descriptor = {"requestId": "req_1", "toolCallId": tool_call_id, "action": action, "summary": summary,
                  "input": input, "permissions": ["deploy:run"], "kind": "durable-pause",
                  **({"risk": risk} if risk else {})}
    return PendingApproval.objects.create(
        execution_id=f"actpause_{uuid.uuid4()}", instance=instance, agent=instance.slug, action_name=action,
        tool_call_id=tool_call_id,
        request_id="req_1", input=input, descriptor=descriptor, risk=risk, summary=summary,
        requested_by=requested_by, created_at=timezone.now() - age,
    )


def rows(html: str) -> list[str]:
    """The result rows of a changelist page, as raw HTML (one entry per ``<tr>`` of the results)."""
    body = html.split('<tbody>', 1)[1].split('</tbody>', 1)[0]
    return body.split("<tr")[1:]


def messages_of(response: Any) -> list[tuple[str, str]]:
    return [(m.level_tag, m.message) for m in response.context["messages"]]


# --- the queue ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_list_shows_each_call_oldest_first_with_its_risk_badge(approver_client, instance, user, make_user):
    bob = make_user("bob")
    other = AgentInstance.objects.create(slug="ops-agent", name="night-shift", owner=bob)
    young = park(other, "restart_service", risk="low", summary="Restart a service", age=timedelta(hours=2))
    old = park(instance, risk="high", age=timedelta(days=3, hours=1), requested_by=user, version="1.4.2")
    mid = park(instance, "refund_order", risk="medium", summary="Refund an order", age=timedelta(days=1, hours=1))

    response = approver_client.get(LIST)
    assert response.status_code == 200
    html = response.content.decode()
    listed = rows(html)
    assert [pk for row in listed for pk in (old.pk, mid.pk, young.pk) if pk in row] == [old.pk, mid.pk, young.pk]
    first = listed[0]
    for cell in ["demo-agent", "room-1", "alice", "deploy_release", "Deploy a release", "3\xa0days"]:
        assert cell in first
    assert "background:#c62828" in first and ">high</span>" in first
    assert "background:#b26a00" in listed[1] and ">medium</span>" in listed[1]
    assert "background:#2e7d32" in listed[2] and ">low</span>" in listed[2]
    assert "night-shift" in listed[2] and "bob" in listed[2] and "2\xa0hours" in listed[2]
    # The requester column: alice asked for the deploy, nobody is recorded for the others.
    assert first.count("alice") == 2
    assert "By agent" in html
    # Decisions are the two bulk actions; no delete, no add.
    assert 'value="approve_selected"' in html and 'value="reject_selected"' in html
    assert "delete_selected" not in html
    assert reverse("admin:agents_app_pendingapproval_add") not in html


@pytest.mark.django_db
def test_list_shows_a_short_escaped_summary_of_each_input(approver_client, instance):
    plain = park(instance, version="1.0.0", environment="production")
    other = park(instance, version="1.0.1", environment="staging")
    hostile = park(instance, note="<script>alert(1)</script>" + " and more" * 40, tags=["a", "b"])
    listed = {pk: row for row in rows(approver_client.get(LIST).content.decode())
              for pk in (plain.pk, other.pk, hostile.pk) if pk in row}
    cell = 'class="field-input_summary">'
    assert f"{cell}version=1.0.0, environment=production</td>" in listed[plain.pk]
    assert f"{cell}version=1.0.1, environment=staging</td>" in listed[other.pk]
    shown = listed[hostile.pk].split(cell, 1)[1].split("</td>", 1)[0]
    assert shown.startswith("note=&lt;script&gt;alert(1)&lt;/script&gt; and more")
    assert "<script>" not in listed[hostile.pk]
    assert shown.endswith("…") and len(html.unescape(shown)) <= INPUT_SUMMARY_CHARS


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "expected"), [
    ("risk=high", {"deploy"}),
    ("risk=low", {"restart"}),
    ("action_name=refund_order", {"refund"}),
    ("agent=ops-agent", {"restart"}),
    ("q=Refund+an", {"refund"}),
    ("q=night-shift", {"restart"}),
    ("q=bob", {"restart"}),
    ("q=restart_service", {"restart"}),
])
def test_filters_and_search(approver_client, instance, make_user, query, expected):
    other = AgentInstance.objects.create(slug="ops-agent", name="night-shift", owner=make_user("bob"))
    made = {
        "deploy": park(instance),
        "refund": park(instance, "refund_order", risk="medium", summary="Refund an order"),
        "restart": park(other, "restart_service", risk="low", summary="Restart a service"),
    }
    html = approver_client.get(f"{LIST}?{query}").content.decode()
    shown = {name for name, row in made.items() if row.pk in html}
    assert shown == expected


@pytest.mark.django_db
def test_search_by_execution_id(approver_client, instance):
    wanted, other = park(instance), park(instance)
    html = approver_client.get(LIST, {"q": wanted.pk}).content.decode()
    assert wanted.pk in html and other.pk not in html


@pytest.mark.django_db
def test_list_queries_do_not_grow_with_rows(approver_client, instance, make_user, django_assert_max_num_queries):
    owners = [make_user(f"owner{i}") for i in range(3)]
    instances = [AgentInstance.objects.create(slug="demo-agent", name=f"r{i}", owner=o) for i, o in enumerate(owners)]

    def page_queries(count: int) -> None:
        for i in range(count):
            park(instances[i % 3], requested_by=owners[i % 3], tool_call_id=f"c{i}")
        with django_assert_max_num_queries(8):
            response = approver_client.get(LIST)
        assert len(rows(response.content.decode())) == PendingApproval.objects.count()

    page_queries(2)
    page_queries(40)


# --- the detail page ---------------------------------------------------------------------------

@pytest.mark.django_db
def test_detail_shows_the_call_the_conversation_and_the_decisions(approver_client, instance, user):
    pending = park(instance, requested_by=user, tool_call_id="call_7", version="1.4.2")
    ChatMessage.objects.create(instance=instance, message_id="m0", role="user", position=0,
                               data={"id": "m0", "role": "user", "parts": [{"type": "text", "text": DEPLOY}]})
    ChatMessage.objects.create(instance=instance, message_id="m1", role="assistant", position=1, data={
        "id": "m1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-deploy_release", "toolCallId": "call_7", "state": "output-available",
             "input": {"version": "1.4.2"},
             "output": {"status": "paused", "executionId": pending.pk, "action": "deploy_release"}},
            {"type": "text", "text": "I asked for approval <b>now</b>."},
        ]})

    response = approver_client.get(detail_url(pending.pk))
    assert response.status_code == 200
    html = response.content.decode()
    assert pending.pk in html
    assert f"href='{reverse('admin:agents_app_agentinstance_change', args=[instance.pk])}'" in html
    assert "demo-agent/room-1" in html
    assert "&quot;version&quot;: &quot;1.4.2&quot;" in html  # the input, as indented JSON
    assert "deploy:run" in html and ">high</span>" in html and "Deploy a release" in html
    # The conversation: the user's prompt, the paused call (marked) and the model's text, escaped.
    assert "/tool deploy_release" in html
    assert 'data-tool="deploy_release" data-state="output-available"' in html and "(this call)" in html
    assert "&quot;status&quot;: &quot;paused&quot;" in html
    assert "I asked for approval &lt;b&gt;now&lt;/b&gt;." in html
    assert response.context["conversation"][1]["parts"][0]["current"] is True
    # The two decisions post to their own views; nothing can be saved or deleted here.
    assert f'action="{decide_url(pending.pk, "approve")}"' in html
    assert f'action="{decide_url(pending.pk, "reject")}"' in html
    assert 'name="reason"' in html
    assert 'name="_save"' not in html and "deletelink" not in html


@pytest.mark.django_db
def test_detail_shows_only_the_last_messages(approver_client, instance):
    pending = park(instance)
    for i in range(25):
        ChatMessage.objects.create(instance=instance, message_id=f"m{i}", role="user", position=i,
                                   data={"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"n{i}"}]})
    shown = approver_client.get(detail_url(pending.pk)).context["conversation"]
    assert [m["parts"][0]["text"] for m in shown] == [f"n{i}" for i in range(5, 25)]


# --- who may see and decide --------------------------------------------------------------------

@pytest.mark.django_db
def test_staff_without_the_permission_gets_403_everywhere(staff, instance):
    pending = park(instance)
    client = Client()
    client.force_login(staff)
    assert client.get(LIST).status_code == 403
    assert client.get(detail_url(pending.pk)).status_code == 403
    assert client.post(decide_url(pending.pk, "approve")).status_code == 403
    assert client.post(decide_url(pending.pk, "reject"), {"reason": "no"}).status_code == 403
    assert client.post(LIST, {"action": "approve_selected", ACTION_CHECKBOX_NAME: [pending.pk]}).status_code == 403
    assert "pendingapproval" not in client.get(reverse("admin:index")).content.decode()
    assert PendingApproval.objects.filter(pk=pending.pk).exists()


@pytest.mark.django_db
def test_staff_without_the_permission_never_reach_a_confirmation(staff, instance):
    """Approving asks to confirm first; that page, like the decision it leads to, is the approvers' own."""
    pending = park(instance, risk="high", version="9.9.9")
    grant(staff, "view_pendingapproval")
    client = Client()
    client.force_login(staff)
    for post in ({}, {"post": "yes"}):
        bulk = client.post(LIST, {"action": "approve_selected", ACTION_CHECKBOX_NAME: [pending.pk], **post})
        single = client.post(decide_url(pending.pk, "approve"), post)
        rejecting = client.post(LIST, {"action": "reject_selected", ACTION_CHECKBOX_NAME: [pending.pk], **post})
        for response in (bulk, single, rejecting):
            assert response.status_code == 403
            assert "9.9.9" not in response.content.decode()
    assert PendingApproval.objects.filter(pk=pending.pk).exists()
    assert not ApprovalDecision.objects.exists()


@pytest.mark.django_db
def test_the_queue_is_on_the_approver_admin_index(approver_client):
    assert LIST in approver_client.get(reverse("admin:index")).content.decode()


@pytest.mark.django_db
def test_decision_views_need_post_and_a_csrf_token(approver, instance):
    pending = park(instance)
    client = Client(enforce_csrf_checks=True)
    client.force_login(approver)
    assert client.get(decide_url(pending.pk, "approve")).status_code == 405
    assert client.post(decide_url(pending.pk, "approve")).status_code == 403
    assert client.post(decide_url(pending.pk, "reject")).status_code == 403
    assert PendingApproval.objects.filter(pk=pending.pk).exists()


# --- the audit log and the ledger --------------------------------------------------------------

@pytest.mark.django_db
def test_decision_log_is_read_only_and_visible_to_approvers_and_viewers(approver_client, staff, instance, user):
    now = timezone.now()
    decision = ApprovalDecision.objects.create(
        execution_id="actpause_x", instance=instance, action_name="deploy_release", decision="rejected",
        reason="not on a Friday", descriptor={"summary": "Deploy a release", "permissions": ["deploy:run"]},
        result={"status": "rejected", "reason": "not on a Friday"}, decided_by=user,
        requested_at=now - timedelta(minutes=5), decided_at=now,
    )
    decisions = reverse("admin:agents_app_approvaldecision_changelist")
    html = approver_client.get(decisions).content.decode()
    assert "background:#c62828" in html and ">rejected</span>" in html
    assert "not on a Friday" in html and "demo-agent/room-1" in html and "alice" in html
    page = approver_client.get(reverse("admin:agents_app_approvaldecision_change", args=[decision.pk]))
    assert "&quot;reason&quot;: &quot;not on a Friday&quot;" in page.content.decode()
    assert 'name="_save"' not in page.content.decode() and "deletelink" not in page.content.decode()

    viewer = Client()
    viewer.force_login(staff)
    assert viewer.get(decisions).status_code == 403
    grant(staff, "view_approvaldecision")
    assert viewer.get(decisions).status_code == 200


@pytest.mark.django_db
def test_ledger_rows_are_shown_with_their_result(make_user):
    admin_client = Client()
    admin_client.force_login(make_user("root", is_staff=True, is_superuser=True))
    now = timezone.now()
    entry = LedgerEntry.objects.create(
        key="tool:call_1", action_name="refund_order", request_id="req_9", tool_call_id="call_1", input_hash="0" * 64,
        status="settled", result_json='{"valuePresent": true, "value": {"refund": 7}}', created_at=now, updated_at=now,
    )
    listing = admin_client.get(reverse("admin:agents_app_ledgerentry_changelist"), {"request_id__exact": "req_9"})
    assert "tool:call_1" in listing.content.decode()
    page = admin_client.get(reverse("admin:agents_app_ledgerentry_change", args=[entry.pk])).content.decode()
    assert "&quot;refund&quot;: 7" in page and "deletelink" not in page


@pytest.mark.django_db
def test_instance_page_links_to_its_approvals_and_ledger(make_user, instance):
    park(instance)
    Turn.objects.create(instance=instance, request_id="req_5")
    admin_client = Client()
    admin_client.force_login(make_user("root", is_staff=True, is_superuser=True))
    html = admin_client.get(reverse("admin:agents_app_agentinstance_change", args=[instance.pk])).content.decode()
    assert f"{LIST}?instance__id__exact={instance.pk}" in html and "pending approvals (1)" in html
    assert f"{reverse('admin:agents_app_ledgerentry_changelist')}?request_id__exact=req_5" in html
    filtered = admin_client.get(LIST, {"instance__id__exact": instance.pk})
    assert len(rows(filtered.content.decode())) == 1


# --- deciding, end to end ----------------------------------------------------------------------
# These run the demo agent's turn (which parks the call) and the service for real; the service
# uses database_sync_to_async, hence transactional tests. Continuations run inline (test settings).

def parked_deploy(user: Any, name: str = "deploy-room", command: str = DEPLOY) -> PendingApproval:
    """Let the demo agent call ``deploy_release`` in a turn of its own: the call parks."""
    agent = async_to_sync(DemoAgent.aget)(name, owner=user)
    assert async_to_sync(agent.save_messages)([command]).status == "completed"
    return PendingApproval.objects.select_related("instance").get(instance=agent.instance)


def deploy_part(pending: PendingApproval) -> dict[str, Any]:
    [reply] = ChatMessage.objects.filter(instance=pending.instance, role="assistant").values_list("data", flat=True)
    return next(p for p in reply["parts"] if p.get("toolCallId") == pending.tool_call_id)


def last_text(pending: PendingApproval) -> str:
    """The model's latest words in the (single) assistant message: the continuation's."""
    [reply] = ChatMessage.objects.filter(instance=pending.instance, role="assistant").values_list("data", flat=True)
    return [p["text"] for p in reply["parts"] if p["type"] == "text"][-1]


def not_pending(execution_id: str) -> str:
    return f'Execution "{execution_id}" is no longer pending — it was approved or rejected elsewhere.'


@pytest.mark.django_db(transaction=True)
def test_approve_button_runs_the_action_once_and_the_conversation_goes_on(approver, approver_client, user):
    pending = parked_deploy(user)
    assert (pending.action_name, pending.risk) == ("deploy_release", "high")
    assert deploy_part(pending)["output"]["status"] == "paused"
    page = approver_client.get(detail_url(pending.pk)).content.decode()
    assert "(this call)" in page and "/tool deploy_release" in page

    # A high-risk call: the button leads to a confirmation, which decides nothing yet.
    asking = approver_client.post(decide_url(pending.pk, "approve"))
    assert asking.status_code == 200
    assert asking.templates[0].name == "admin/agents_app/pendingapproval/approve_selected.html"
    html = asking.content.decode()
    assert pending.pk in html and "&quot;version&quot;: &quot;1.4.2&quot;" in html and ">high</span>" in html
    assert f'action="{decide_url(pending.pk, "approve")}"' in html and 'name="post" value="yes"' in html
    assert PendingApproval.objects.filter(pk=pending.pk).exists()
    assert not ApprovalDecision.objects.exists()
    assert deploy_part(pending)["output"]["status"] == "paused"

    response = approver_client.post(decide_url(pending.pk, "approve"), {"post": "yes"}, follow=True)
    assert response.redirect_chain == [(LIST, 302)]
    assert messages_of(response) == [("success", f"Approved deploy_release ({pending.pk}): {DEPLOYED}")]
    assert not PendingApproval.objects.exists()
    decision = ApprovalDecision.objects.get(execution_id=pending.pk)
    assert (decision.decision, decision.decided_by, decision.result) == ("approved", approver, DEPLOYED)
    assert deploy_part(pending)["output"] == DEPLOYED
    assert last_text(pending).startswith(CONTINUED)

    again = approver_client.post(decide_url(pending.pk, "approve"), {"post": "yes"}, follow=True)
    assert messages_of(again) == [("error", not_pending(pending.pk))]
    assert ApprovalDecision.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_approve_button_of_a_medium_risk_call_decides_at_once(approver, approver_client, user):
    pending = parked_deploy(user)
    PendingApproval.objects.filter(pk=pending.pk).update(risk="medium")  # as a medium-risk action parks it
    page = approver_client.get(detail_url(pending.pk)).content.decode()
    assert f'action="{decide_url(pending.pk, "approve")}"' in page

    response = approver_client.post(decide_url(pending.pk, "approve"), follow=True)
    assert response.redirect_chain == [(LIST, 302)]
    assert messages_of(response) == [("success", f"Approved deploy_release ({pending.pk}): {DEPLOYED}")]
    assert ApprovalDecision.objects.get(execution_id=pending.pk).decision == "approved"


@pytest.mark.django_db(transaction=True)
def test_reject_button_tells_the_model_the_reason(approver, approver_client, user):
    pending = parked_deploy(user)
    response = approver_client.post(decide_url(pending.pk, "reject"), {"reason": "  Not on a Friday "}, follow=True)
    assert messages_of(response) == [("success", f"Rejected deploy_release ({pending.pk}).")]
    rejected = {"status": "rejected", "executionId": pending.pk, "action": "deploy_release",
                "reason": "Not on a Friday"}
    decision = ApprovalDecision.objects.get(execution_id=pending.pk)
    assert (decision.decision, decision.reason, decision.decided_by, decision.result) == \
        ("rejected", "Not on a Friday", approver, rejected)
    assert deploy_part(pending)["output"] == rejected
    assert last_text(pending) == "Staff rejected deploy_release: Not on a Friday."
    again = approver_client.post(decide_url(pending.pk, "reject"), {"reason": "twice"}, follow=True)
    assert messages_of(again) == [("error", not_pending(pending.pk))]


@pytest.mark.django_db(transaction=True)
def test_approve_selected_lists_each_call_with_its_input_and_risk_before_deciding(approver, approver_client, user):
    first = parked_deploy(user, "bulk-a", '/tool deploy_release {"version": "1.0.0"}')
    second = parked_deploy(user, "bulk-b", '/tool deploy_release {"version": "2.0.0", "environment": "staging"}')
    selection = {"action": "approve_selected", ACTION_CHECKBOX_NAME: [first.pk, second.pk]}

    asking = approver_client.post(LIST, selection)
    assert asking.status_code == 200
    assert asking.templates[0].name == "admin/agents_app/pendingapproval/approve_selected.html"
    html = asking.content.decode()
    listed = html.split('<table id="selected-executions"', 1)[1].split("</table>", 1)[0]
    assert first.pk in listed and second.pk in listed
    # Each input in full, as indented JSON (escaped).
    assert "&quot;version&quot;: &quot;1.0.0&quot;,\n  &quot;environment&quot;: &quot;production&quot;" in listed
    assert "&quot;version&quot;: &quot;2.0.0&quot;,\n  &quot;environment&quot;: &quot;staging&quot;" in listed
    assert listed.count(">high</span>") == 2
    assert "bulk-a" in listed and "bulk-b" in listed
    assert 'name="post" value="yes"' in html and 'value="approve_selected"' in html
    # Nothing ran: both calls are still parked and nobody decided.
    assert set(PendingApproval.objects.values_list("pk", flat=True)) == {first.pk, second.pk}
    assert not ApprovalDecision.objects.exists()
    assert deploy_part(first)["output"]["status"] == deploy_part(second)["output"]["status"] == "paused"

    response = approver_client.post(LIST, {**selection, "post": "yes"}, follow=True)
    assert messages_of(response) == [("success", "Approved 2 actions.")]
    assert set(ApprovalDecision.objects.values_list("execution_id", "decision", "decided_by")) == \
        {(first.pk, "approved", approver.pk), (second.pk, "approved", approver.pk)}
    assert deploy_part(first)["output"] == "Deployed 1.0.0 to production."
    assert deploy_part(second)["output"] == "Deployed 2.0.0 to staging."
    assert not PendingApproval.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_approve_selected_reports_each_lost_race(approver, approver_client, user):
    first, second, third = (parked_deploy(user, f"bulk-{i}") for i in range(3))
    selection = {"action": "approve_selected", ACTION_CHECKBOX_NAME: [first.pk, second.pk, third.pk]}
    # Another approver decides the second one after this list was drawn: the confirmation says so.
    async_to_sync(approvals.reject_execution)(second.pk, "elsewhere")
    asking = approver_client.post(LIST, selection).content.decode()
    listed = asking.split('<table id="selected-executions"', 1)[1].split("</table>", 1)[0]
    assert first.pk in listed and third.pk in listed and second.pk not in listed
    assert f"{second.pk}" in asking.split('id="no-longer-pending"', 1)[1]

    # And the third one while the confirmation was open.
    async_to_sync(approvals.reject_execution)(third.pk, "elsewhere")
    response = approver_client.post(LIST, {"action": "approve_selected", "post": "yes",
                                           ACTION_CHECKBOX_NAME: [first.pk, third.pk]}, follow=True)
    assert messages_of(response) == [("error", not_pending(third.pk)), ("success", "Approved 1 action.")]
    decided = dict(ApprovalDecision.objects.values_list("execution_id", "decision"))
    assert decided == {first.pk: "approved", second.pk: "rejected", third.pk: "rejected"}
    assert deploy_part(first)["output"] == DEPLOYED
    assert not PendingApproval.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_reject_selected_asks_for_a_reason_first(approver, approver_client, user):
    first, second = parked_deploy(user, "bulk-a"), parked_deploy(user, "bulk-b")
    selection = {"action": "reject_selected", ACTION_CHECKBOX_NAME: [first.pk, second.pk]}

    asking = approver_client.post(LIST, selection)
    assert asking.status_code == 200
    html = asking.content.decode()
    assert 'name="reason"' in html and 'name="post" value="yes"' in html
    listed = html.split('<table id="selected-executions"', 1)[1].split("</table>", 1)[0]
    assert first.pk in listed and second.pk in listed and "bulk-a" in listed
    assert listed.count("&quot;version&quot;: &quot;1.4.2&quot;") == 2 and listed.count(">high</span>") == 2
    assert PendingApproval.objects.count() == 2

    response = approver_client.post(LIST, {**selection, "post": "yes", "reason": "Release freeze"}, follow=True)
    assert messages_of(response) == [("success", "Rejected 2 actions.")]
    assert set(ApprovalDecision.objects.values_list("decision", "reason", "decided_by")) == \
        {("rejected", "Release freeze", approver.pk)}
    assert deploy_part(first)["output"]["reason"] == deploy_part(second)["output"]["reason"] == "Release freeze"
