"""Quotas and usage in Chromium: staff give a user a daily quota in the admin, the user's next turn
over it shows the quota's error in the chat, and the admin's usage page shows who hit the limit
beside its chart (docs/operations.md#usage-and-quotas)."""

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.pages import PASSWORD, Live, assistant_texts, open_chat, send_message
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser

QUOTA_USER = "quota-user"


@pytest.fixture(scope="module")
def quota_user(live: Live) -> int:
    return live.stack.create_user(QUOTA_USER, PASSWORD)


@pytest.fixture
def quota_user_page(browser: Browser, cookies_of: Callable[[str], Any], quota_user: int) -> Iterator[Page]:
    ctx: BrowserContext = browser.new_context(
        viewport={"width": 1100, "height": 800}, storage_state=cookies_of(QUOTA_USER)
    )
    yield ctx.new_page()
    ctx.close()


@pytest.fixture
def admin_page(superuser_context: BrowserContext) -> Page:
    return superuser_context.new_page()


def test_a_quota_set_in_the_admin_stops_the_users_next_turn(
    admin_page: Page, quota_user_page: Page, live: Live, quota_user: int, room: str
) -> None:
    admin_page.goto(f"{live.http}/admin/agents_app/usagequota/add/")
    admin_page.fill("#id_user", str(quota_user))
    admin_page.fill("#id_tokens_per_day", "1")
    admin_page.click("input[name=_save]")
    expect(admin_page.locator("#result_list")).to_contain_text(QUOTA_USER)

    page = quota_user_page
    open_chat(page, live, room)
    send_message(page, "hello")
    wait_until(lambda: any("You said: hello" in text for text in assistant_texts(page)), "the first reply", timeout=15)
    send_message(page, "and again")
    expect(
        page.get_by_text(re.compile(r"Usage quota reached: you have used \d+ of your 1 tokens this day"))
    ).to_be_visible()

    admin_page.goto(f"{live.http}/admin/agents_app/turnusage/?refused=yes")
    expect(admin_page.locator("#result_list")).to_contain_text(QUOTA_USER)
    expect(admin_page.locator("#result_list")).to_contain_text("user per day")
    expect(admin_page.locator("#usage-by-user")).to_contain_text(QUOTA_USER)
    admin_page.goto(f"{live.http}/admin/agents_app/turnusage/")
    chart = admin_page.locator("svg.usage-chart")
    expect(chart).to_be_visible()
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 50
    expect(chart.locator("rect").first).to_be_attached()
