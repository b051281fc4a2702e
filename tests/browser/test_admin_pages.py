"""The agents admin in Chromium, at 1280 px with the navigation sidebar open: read-only pages show
no delete, every list fits, and a pending call's decisions are at the top of its page."""

import pytest
from django.contrib.admin.utils import quote
from playwright.sync_api import BrowserContext, Page, expect

from tests.browser.pages import Live

pytestmark = pytest.mark.browser

LONG = "a-rather-long-name-" * 4
# Rows with long values in every list (made once per session by ``long_rows``).
SEED = f"""
import uuid
from django.utils import timezone
from django.contrib.auth import get_user_model
from agents_app.models import AgentInstance, ApprovalDecision, LedgerEntry, PendingApproval, Turn
from agents_app.demo.models import Refund
now = timezone.now()
alice = get_user_model().objects.get(username="alice")
instance = AgentInstance.objects.create(slug="demo-agent", name="{LONG}", owner=alice)
Turn.objects.create(instance=instance, request_id="request-" + "x" * 40, status="completed", finished_at=now)
pending = PendingApproval.objects.create(
    execution_id=f"actpause_{{uuid.uuid4()}}", instance=instance, agent="demo-agent", action_name="deploy_release",
    tool_call_id="call-" + "y" * 40, input={{"version": "1.4.2"}}, descriptor={{"summary": "Deploy a release"}},
    summary="Deploy release 1.4.2 to the production cluster of the northern region", risk="high",
    requested_by=alice, created_at=now)
ApprovalDecision.objects.create(
    execution_id="actpause_" + "z" * 30, instance=instance, action_name="deploy_release", decision="rejected",
    reason="Not on a Friday afternoon, and not without a rollback plan written down first", descriptor={{}},
    decided_by=alice, requested_at=now, decided_at=now)
LedgerEntry.objects.create(
    scope=str(instance.pk), key="action:refund_order:refund:ORDER-" + "X" * 50, action_name="refund_order",
    request_id="request-" + "x" * 40, tool_call_id="call-" + "y" * 40, input_hash="0" * 64, status="settled",
    created_at=now, updated_at=now)
Refund.objects.create(order_id="ORDER-" + "X" * 50, amount=250, reason="because it broke " * 8,
                      request_id="request-" + "x" * 40, tool_call_id="call-" + "y" * 40)
print(instance.pk, pending.pk)
"""
LISTS = ["agents_app/agentinstance", "agents_app/turn", "agents_app/pendingapproval", "agents_app/approvaldecision",
         "agents_app/ledgerentry", "demo/refund"]


@pytest.fixture(scope="module")
def long_rows(live: Live) -> tuple[str, str]:
    """The pks of the seeded instance and pending call."""
    instance_pk, execution_id = live.stack.manage("shell", "--no-imports", "-c", SEED).split()[-2:]
    return instance_pk, execution_id


@pytest.fixture
def admin_page(superuser_context: BrowserContext) -> Page:
    return superuser_context.new_page()


def test_every_list_fits_a_1280_px_window(admin_page: Page, live: Live, long_rows: tuple[str, str]) -> None:
    for model in LISTS:
        admin_page.goto(f"{live.http}/admin/{model}/")
        results = admin_page.locator("#changelist-form .results")
        expect(results.locator("tbody tr").first).to_be_visible()
        assert admin_page.locator("#nav-sidebar").is_visible()
        overflow = results.evaluate("e => e.scrollWidth - e.clientWidth")
        assert overflow <= 0, f"{model}: {overflow} px of columns are cut"


def test_read_only_models_show_no_delete(admin_page: Page, live: Live, long_rows: tuple[str, str]) -> None:
    for model in LISTS:
        admin_page.goto(f"{live.http}/admin/{model}/")
        assert "Delete selected" not in (admin_page.locator("#changelist-form").inner_text())
        expect(admin_page.locator(".object-tools .addlink")).to_have_count(0)
        admin_page.locator("#result_list tbody tr").first.locator("a").first.click()
        admin_page.wait_for_selector("#content-main")
        expect(admin_page.locator(".deletelink")).to_have_count(0)
        expect(admin_page.locator("input[name=_save]")).to_have_count(0)


def test_the_decisions_are_at_the_top_of_a_pending_call(admin_page: Page, live: Live,
                                                        long_rows: tuple[str, str]) -> None:
    _, execution_id = long_rows
    # Quoted as the admin's own links are: in a raw "actpause_25…", "_25" would read as "%".
    admin_page.goto(f"{live.http}/admin/agents_app/pendingapproval/{quote(execution_id)}/change/")
    approve = admin_page.locator("#approve-form input[type=submit]")
    expect(approve).to_be_in_viewport()
    expect(admin_page.locator("#reject-form input[type=submit]")).to_be_in_viewport()
    first_fieldset = admin_page.locator("fieldset").first.bounding_box()
    assert (approve.bounding_box() or {})["y"] < (first_fieldset or {})["y"]


def test_the_instance_page_reads_as_a_conversation(admin_page: Page, live: Live, long_rows: tuple[str, str]) -> None:
    instance_pk, _ = long_rows
    admin_page.goto(f"{live.http}/admin/agents_app/agentinstance/{instance_pk}/change/")
    expect(admin_page.locator("#transcript h2")).to_have_text("Transcript (0 messages)")
    admin_page.click("#open-in-chat")
    admin_page.wait_for_selector("#chat[data-ready=true]")
    expect(admin_page.locator("#owner-note")).to_have_text("alice's conversation")
