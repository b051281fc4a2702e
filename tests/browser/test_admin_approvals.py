"""Durable pauses decided in the admin while the user's chat page watches.

The user asks the demo agent to deploy; the call parks and the turn ends. A staff approver, in a
browser of their own, opens "Pending approvals" in the admin, opens the call and approves (a
deploy is high risk: a confirmation page comes first) or rejects it, or ticks several in the
list and approves them together, again through a confirmation that shows each call's input.
The chat page, left open, shows the decision and the model's follow-up as they happen: the tool
part is replaced (``cf_agent_message_updated``) and the continuation turn, run by the stack's
Celery worker, streams to it, with no reload.
"""

from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect

from tests.browser.pages import Live, open_chat, send_message

pytestmark = pytest.mark.browser

DEPLOY = '/tool deploy_release {"version": "1.4.2"}'
DEPLOYED = "Deployed 1.4.2 to production."


def park_deploy(page: Page, live: Live, room: str, command: str = DEPLOY) -> tuple[Locator, str]:
    """Ask for the deploy in the chat page; returns the paused card and its execution id."""
    open_chat(page, live, room)
    send_message(page, command)
    card = page.locator(".msg.assistant .part.tool[data-tool=deploy_release]")
    expect(card).to_have_attribute("data-decision", "paused")
    expect(page.locator("#status")).to_have_text("connected")
    execution_id = card.locator(".execution-id").text_content() or ""
    assert execution_id.startswith("actpause_")
    return card, execution_id


def open_pending(admin: Page, live: Live, room: str, execution_id: str) -> None:
    """From the admin index, open the room's row of "Pending approvals"."""
    admin.goto(f"{live.http}/admin/")
    admin.get_by_role("link", name="Pending approvals").click()
    row = admin.locator("#result_list tbody tr").filter(has_text=room)
    expect(row).to_have_count(1)
    expect(row.locator(".field-conversation")).to_have_text(f"demo-agent/{room}")
    expect(row.locator(".field-owner")).to_have_text("alice")
    expect(row.locator(".field-risk_badge")).to_have_text("high")
    expect(row.locator(".field-action a")).to_contain_text("deploy_release")
    expect(row.locator(".field-action .action-summary")).to_have_text("Deploy a release")
    row.locator(".field-action a").click()
    expect(admin.locator(".field-execution_id .readonly")).to_have_text(execution_id)
    expect(admin.locator(".agent-conversation")).to_contain_text(DEPLOY)
    expect(admin.locator(".agent-conversation .part.tool.current")).to_have_attribute("data-state",
                                                                                          "output-available")


def still_pending(live: Live, *execution_ids: str) -> set[str]:
    """Which of these executions are still parked, read from the live stack's database."""
    code = ("from agents_app.models import PendingApproval as P;"
            f"print('pending:', *P.objects.filter(pk__in={list(execution_ids)!r}).values_list('pk', flat=True))")
    [line] = [line for line in live.stack.manage("shell", "-c", code).splitlines() if line.startswith("pending:")]
    return set(line.split()[1:])  # after the shell's own notes


def watching_history(page: Page) -> Callable[[], int]:
    """How many times the page loads the transcript from now on (a live update loads it never)."""
    loads: list[str] = []
    page.on("request", lambda r: loads.append(r.url) if r.url.endswith("/get-messages") else None)
    return lambda: len(loads)


def test_staff_approve_in_the_admin_and_the_chat_follows_live(page: Page, approver_context: BrowserContext,
                                                              live: Live, room: str) -> None:
    card, execution_id = park_deploy(page, live, room)
    history_loads = watching_history(page)
    admin = approver_context.new_page()
    open_pending(admin, live, room, execution_id)

    admin.locator("#approve-form input[type=submit]").click()
    # A deploy is high risk: the button asks to confirm, with the input, and nothing runs yet.
    expect(admin.locator("#content h1")).to_have_text("Approve this action?")
    confirm_row = admin.locator("#selected-executions tbody tr")
    expect(confirm_row).to_have_count(1)
    expect(confirm_row.locator(".input")).to_contain_text('"version": "1.4.2"')
    expect(confirm_row.locator(".risk")).to_have_text("high")
    assert still_pending(live, execution_id) == {execution_id}
    expect(card).to_have_attribute("data-decision", "paused")
    admin.locator("#approve-selected-form input[type=submit]").click()
    expect(admin.locator(".messagelist .success")).to_have_text(
        f"Approved deploy_release ({execution_id}): {DEPLOYED}")
    expect(admin.locator("#result_list tbody tr").filter(has_text=room)).to_have_count(0)

    expect(card).to_have_attribute("data-decision", "approved")
    expect(card.locator(".tool-decision")).to_have_text(f"Approved: {DEPLOYED}")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text(DEPLOYED)
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator("#status")).to_have_text("connected")
    assert history_loads() == 0


def test_staff_reject_with_a_reason_and_the_chat_shows_it_live(page: Page, approver_context: BrowserContext,
                                                               live: Live, room: str) -> None:
    card, execution_id = park_deploy(page, live, room)
    history_loads = watching_history(page)
    admin = approver_context.new_page()
    open_pending(admin, live, room, execution_id)

    admin.locator("#reject-form textarea[name=reason]").fill("Not on a Friday")
    admin.locator("#reject-form input[type=submit]").click()
    expect(admin.locator(".messagelist .success")).to_have_text(f"Rejected deploy_release ({execution_id}).")

    expect(card).to_have_attribute("data-decision", "rejected")
    expect(card.locator(".tool-decision")).to_have_text("Rejected: Not on a Friday")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text(
        "Staff rejected deploy_release: Not on a Friday.")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator("#status")).to_have_text("connected")
    assert history_loads() == 0
    assert DEPLOYED not in page.locator("#messages").inner_text()


def test_approve_two_deploys_from_the_list_after_a_confirmation(page: Page, approver_context: BrowserContext,
                                                                live: Live, room: str) -> None:
    rooms = [f"{room}-a", f"{room}-b"]
    versions = ["1.0.0", "2.0.0"]
    parked = [park_deploy(page, live, name, f'/tool deploy_release {{"version": "{version}"}}')
              for name, version in zip(rooms, versions, strict=True)]
    card = parked[-1][0]  # the page shows the last room's conversation
    execution_ids = [execution_id for _, execution_id in parked]
    admin = approver_context.new_page()
    admin.goto(f"{live.http}/admin/agents_app/pendingapproval/?q={room}")

    # The two look alike but for their input, which the list shows.
    listed = admin.locator("#result_list tbody tr")
    expect(listed).to_have_count(2)
    for name, version in zip(rooms, versions, strict=True):
        row = listed.filter(has_text=name)
        expect(row.locator(".field-input_summary")).to_have_text(f"version={version}, environment=production")
        row.locator("input.action-select").check()
    admin.locator("select[name=action]").select_option("approve_selected")
    admin.locator("button[name=index]").click()

    expect(admin.locator("#content h1")).to_have_text("Approve the selected actions?")
    rows = admin.locator("#selected-executions tbody tr")
    expect(rows).to_have_count(2)
    for name, version, execution_id in zip(rooms, versions, execution_ids, strict=True):
        row = rows.filter(has_text=execution_id)
        expect(row.locator(".conversation")).to_have_text(f"demo-agent/{name}")
        expect(row.locator(".input")).to_contain_text(f'"version": "{version}"')
        expect(row.locator(".input")).to_contain_text('"environment": "production"')
        expect(row.locator(".risk")).to_have_text("high")
    # Nothing ran yet: both calls are still parked.
    assert still_pending(live, *execution_ids) == set(execution_ids)
    expect(card).to_have_attribute("data-decision", "paused")

    admin.locator("#approve-selected-form input[type=submit]").click()
    expect(admin.locator(".messagelist .success")).to_have_text("Approved 2 actions.")
    expect(admin.locator("#result_list tbody tr")).to_have_count(0)
    assert not still_pending(live, *execution_ids)
    expect(card).to_have_attribute("data-decision", "approved")
    expect(card.locator(".tool-decision")).to_have_text("Approved: Deployed 2.0.0 to production.")
