"""Logging in and out as a newcomer does it, in Chromium against the live stack: a failed login keeps
the username, the top bar says who is signed in, a conversation written to a moment ago was updated
"just now", and logging out says so on the page it lands on."""

import pytest
from playwright.sync_api import BrowserContext, expect

from tests.browser.pages import PASSWORD, SUPERUSER, USERNAME, Live, open_chat, send_message

pytestmark = pytest.mark.browser


def test_a_newcomers_first_minutes_log_in_look_around_log_out(context: BrowserContext, live: Live,
                                                                room: str) -> None:
    context.clear_cookies()
    page = context.new_page()
    page.goto(f"{live.http}/accounts/login/")
    page.fill("input[name=username]", USERNAME)
    page.fill("input[name=password]", "not the password")
    page.click("#login-form button[type=submit]")
    expect(page.locator(".card .error")).to_have_text("Your username and password didn't match.")
    # The username is still there; only the password needs typing again.
    expect(page.locator("input[name=username]")).to_have_value(USERNAME)
    expect(page.locator("input[name=password]")).to_have_value("")
    page.fill("input[name=password]", PASSWORD)
    page.click("#login-form button[type=submit]")
    page.wait_for_url(f"{live.http}/")

    expect(page.locator("nav.account")).to_have_text(f"Signed in as {USERNAME} · Log out")
    expect(page.locator("#who")).to_be_visible()

    # A conversation is stored by its first message (opening its page stores nothing).
    open_chat(page, live, room)
    send_message(page, "hello")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    page.goto(f"{live.http}/")
    row = page.locator("#instances li").filter(has_text=room)
    expect(row.locator("small")).to_have_text("updated just now")

    page.get_by_role("button", name="Log out").click()
    page.wait_for_url(f"{live.http}/accounts/login/")
    expect(page.locator("#notices")).to_have_text("You have been logged out.")
    expect(page.locator("nav.account")).to_have_count(0)
    page.reload()
    expect(page.locator("#notices")).to_have_count(0)


def test_the_top_bar_of_a_superuser_names_each_link(superuser_context: BrowserContext, live: Live) -> None:
    page = superuser_context.new_page()
    page.goto(f"{live.http}/")
    expect(page.locator("nav.account")).to_have_text(
        f"Signed in as {SUPERUSER} · Invite someone · Admin site · Log out")
    page.get_by_role("link", name="Invite someone").click()
    expect(page.locator("h1")).to_have_text("Invite someone")
    page.get_by_role("link", name="Admin site").click()
    expect(page).to_have_url(f"{live.http}/admin/")
