"""An operator's scheduled prompt, in headless Chromium against the live stack (ASGI server + a Celery worker).

The operator is staff with ``manage_schedules`` only (no superuser), in a browser set to Oslo time.
They add "every day at 09:00 in Europe/Oslo" in the admin, see its next run at 09:00 their time,
open the conversation in another tab, click "Run now", and watch the prompt arrive there labelled
"scheduled: daily-report" and the agent's reply stream in: the worker ran it as a turn. A bad
schedule and a bad agent are form errors.
"""

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import TIMEOUT_MS
from tests.browser.pages import PASSWORD, Live, login, open_chat

pytestmark = pytest.mark.browser

OPERATOR = "operator"
PROMPT = "Generate the daily report."


@pytest.fixture(scope="module")
def operator(live: Live) -> str:
    code = (
        "from django.contrib.auth import get_user_model as g;"
        "from django.contrib.auth.models import Permission as P;"
        f"u=g().objects.create_user({OPERATOR!r}, password={PASSWORD!r}, is_staff=True);"
        "u.user_permissions.add(P.objects.get(codename='manage_schedules', content_type__app_label='agents_app'))"
    )
    live.stack.manage("shell", "-c", code)
    return OPERATOR


@pytest.fixture
def oslo(browser: Browser, live: Live, operator: str) -> Iterator[BrowserContext]:
    """The operator's browser, on Oslo time, logged in; fails the test on an uncaught page error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="Europe/Oslo", locale="en-GB")
    context.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    context.on("weberror", lambda error: errors.append(str(error.error)))
    login(context.new_page(), live, operator)
    yield context
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def add_schedule(admin: Page, live: Live, room: str, schedule: str, agent: str = "demo-agent") -> None:
    admin.goto(f"{live.http}/admin/")
    admin.get_by_role("link", name="Scheduled prompts").click()
    admin.get_by_role("link", name="Add scheduled prompt").click()
    admin.fill("#id_name", "daily-report")
    admin.select_option("#id_agent", agent)
    admin.fill("#id_instance_name", room)
    admin.fill("#id_prompt", PROMPT)
    admin.fill("#id_schedule", schedule)
    admin.click("input[name=_save]")


def test_an_operator_schedules_a_prompt_runs_it_now_and_the_chat_shows_it_as_scheduled(
        oslo: BrowserContext, live: Live, room: str) -> None:
    admin = oslo.new_page()
    add_schedule(admin, live, room, "every day at 09:00 in Europe/Oslo")
    row = admin.locator("#result_list tbody tr").filter(has_text=f"demo-agent/{room}")
    expect(row).to_have_count(1)
    expect(row.locator(".field-schedule_text")).to_have_text("every day at 09:00 in Europe/Oslo")
    next_run = row.locator(".field-next_run time")
    expect(next_run).to_have_attribute("data-localised", "true")
    expect(next_run).to_contain_text("09:00")
    expect(row.locator(".field-last_run_summary")).to_have_text("—")

    chat = oslo.new_page()
    # Scheduled prompts run in the global namespace: staff open it with an empty ?owner=.
    open_chat(chat, live, room, query="?owner=")
    admin.bring_to_front()
    row.locator(".field-name a").click()
    admin.click("#run-now-form input[type=submit]")
    expect(admin.locator(".messagelist .success")).to_have_text(
        "Started daily-report: its run is on its way to a worker.")

    scheduled = chat.locator(".msg.user")
    expect(scheduled.locator(".role")).to_have_text("scheduled: daily-report")
    expect(scheduled.locator(".part.text")).to_have_text(PROMPT)
    expect(chat.locator(".msg.assistant .part.text").last).to_have_text(f"(demo model, offline) You said: {PROMPT}")
    expect(chat.locator("#status")).to_have_text("connected")

    admin.goto(f"{live.http}/admin/agents_app/schedule/")
    summary = admin.locator("#result_list tbody tr").filter(has_text=f"demo-agent/{room}").locator(
        ".field-last_run_summary")
    expect(summary.locator(".run-status")).to_have_text("Completed")
    expect(summary.get_by_role("link", name="conversation")).to_have_attribute(
        "href", f"/chat/demo-agent/{room}/?owner=")


def test_a_bad_schedule_or_agent_is_a_form_error(oslo: BrowserContext, live: Live, room: str) -> None:
    admin = oslo.new_page()
    add_schedule(admin, live, room, "every day at 25:00 in Europe/Oslo")
    expect(admin.locator(".field-schedule .errorlist")).to_have_text('Invalid schedule time "25:00"; expected HH:mm')

    admin.fill("#id_schedule", "every day at 09:00")
    admin.click("input[name=_save]")
    expect(admin.locator(".field-schedule .errorlist")).to_have_text(
        'Wall-clock schedule "every day at 09:00" requires a timezone or get_default_timezone()')

    # An agent that is not (or no longer) registered, as a stale form would post it.
    admin.fill("#id_schedule", "every day at 09:00 in Europe/Oslo")
    admin.eval_on_selector("#id_agent", "s => { s.add(new Option('ghost-agent')); s.value = 'ghost-agent'; }")
    admin.click("input[name=_save]")
    expect(admin.locator(".field-agent .errorlist")).to_have_text(
        "Select a valid choice. ghost-agent is not one of the available choices.")
    admin.goto(f"{live.http}/admin/agents_app/schedule/")
    expect(admin.locator("#result_list tbody tr").filter(has_text=room)).to_have_count(0)
