"""Durable pauses decided in the admin while the user's chat page watches (spec §5.10).

The user asks the demo agent to deploy; the call parks and the turn ends. A staff approver, in a
browser of their own, opens "Pending approvals" in the admin, opens the call and approves or
rejects it. The chat page, left open, shows the decision and the model's follow-up as they
happen: the tool part is replaced (``cf_agent_message_updated``) and the continuation turn, run
by the stack's Celery worker, streams to it, with no reload.
"""

from collections.abc import Callable

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect

from tests.browser.pages import Live, open_chat, send_message

pytestmark = pytest.mark.browser

DEPLOY = '/tool deploy_release {"version": "1.4.2"}'
DEPLOYED = "Deployed 1.4.2 to production."


def park_deploy(page: Page, live: Live, room: str) -> tuple[Locator, str]:
    """Ask for the deploy in the chat page; returns the paused card and its execution id."""
    open_chat(page, live, room)
    send_message(page, DEPLOY)
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
    row.locator(".field-action_name a").click()
    expect(admin.locator(".field-execution_id .readonly")).to_have_text(execution_id)
    expect(admin.locator(".agent-conversation")).to_contain_text(DEPLOY)
    expect(admin.locator(".agent-conversation .part.tool.current")).to_have_attribute("data-state",
                                                                                          "output-available")


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
