"""An operator's scheduled prompt, in headless Chromium against the live stack (ASGI server + a Celery worker).

The operator is staff with ``manage_schedules`` only (no superuser), in a browser set to Oslo time.
They add "every day at 09:00 in Europe/Oslo" in the admin, see its next run at 09:00 their time,
open the conversation in another tab, click "Run now", and watch the prompt arrive there labelled
"scheduled: daily-report" and the agent's reply stream in: the worker ran it as a turn. A bad
schedule and a bad agent are form errors; while they type a schedule, the form says what it
means and when it runs next (or what it did not understand). The lists fit a 1280 px window, and
"Run now" is at the top of a schedule's page.
"""

from collections.abc import Iterator
from datetime import datetime
from zoneinfo import ZoneInfo

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
    row.get_by_role("link", name="daily-report").click()
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
    expect(admin.locator(".field-schedule .errorlist")).to_have_text(
        'Invalid schedule time "25:00": use HH:MM (00:00 to 23:59), 9am or 9:30pm. Try "every day at 09:00" or '
        '"every day at 9:30pm".')

    admin.fill("#id_schedule", "every day at 09:00")
    admin.click("input[name=_save]")
    expect(admin.locator(".field-schedule .errorlist")).to_have_text(
        'Wall-clock schedule "every day at 09:00" requires a timezone or get_default_timezone(): add one, e.g. '
        '"every day at 09:00 in Europe/Oslo"')

    # An agent that is not (or no longer) registered, as a stale form would post it.
    admin.fill("#id_schedule", "every day at 09:00 in Europe/Oslo")
    admin.eval_on_selector("#id_agent", "s => { s.add(new Option('ghost-agent')); s.value = 'ghost-agent'; }")
    admin.click("input[name=_save]")
    expect(admin.locator(".field-agent .errorlist")).to_have_text(
        "Select a valid choice. ghost-agent is not one of the available choices.")
    admin.goto(f"{live.http}/admin/agents_app/schedule/")
    expect(admin.locator("#result_list tbody tr").filter(has_text=room)).to_have_count(0)


def test_the_form_says_what_a_schedule_means_while_the_operator_types(oslo: BrowserContext, live: Live) -> None:
    admin = oslo.new_page()
    admin.goto(f"{live.http}/admin/agents_app/schedule/add/")
    admin.select_option("#id_agent", "demo-agent")
    preview = admin.locator(".field-schedule #schedule-preview")
    admin.fill("#id_schedule", "every monday at 9am in Europe/Oslo")
    expect(preview.locator(".schedule-meaning")).to_have_text("every monday at 09:00 (Europe/Oslo)")
    runs = preview.locator("time.local-time[data-localised=true]")
    expect(runs).to_have_count(3)
    for moment in runs.all():
        expect(moment).to_contain_text("09:00")  # the browser is on Oslo time
        at = datetime.fromisoformat(moment.get_attribute("datetime") or "").astimezone(ZoneInfo("Europe/Oslo"))
        assert (at.weekday(), at.hour) == (0, 9)

    admin.fill("#id_schedule", "evry day at 09:00")
    expect(preview.locator(".schedule-preview-errors")).to_have_text(
        'Could not read "evry day at 09:00": "evry" is not understood (did you mean "every"?). Try "every day at '
        '09:00" or "every monday at 9am in Europe/Oslo".')
    expect(runs).to_have_count(0)
    admin.fill("#id_schedule", "every day at 09:00 in Europe/Olso")
    expect(preview.locator(".schedule-preview-errors")).to_have_text(
        'Invalid timezone "Europe/Olso"; did you mean "Europe/Oslo"?')
    admin.fill("#id_schedule", "every 15 minutes")
    expect(preview.locator(".schedule-meaning")).to_have_text("every 15 minutes")
    expect(runs).to_have_count(3)


# A schedule with long values everywhere, as a busy deployment has them.
LONG_NAME = "weekly-escalation-summary-for-the-regional-managers"
LONG_ERROR = " ".join(["ProviderError: upstream model returned 503 Service Unavailable after 3 attempts; see "
                       "https://status.example-provider.com/incidents/2026-12-04/model-capacity-eu-west-1-degraded"
                       "-performance for details."] * 3)


def seed_failing_schedule(live: Live, instance: str) -> None:
    code = (
        "from django.utils import timezone as tz;"
        "from agents_app.models import Schedule, ScheduleRun;"
        "from agents_app.schedules import definitions as d, language as dsl;"
        f"s={'every week on monday,tuesday,wednesday,thursday,friday at 07:00 in America/Argentina/Buenos_Aires'!r};"
        f"row=d.save_operator_schedule(Schedule(name={LONG_NAME!r}, prompt='p', schedule=s), 'demo-agent', "
        f"{instance!r}, dsl.parse(s), None);"
        "now=tz.now();"
        "run=ScheduleRun.objects.create(schedule=row, instance=row.instance, occurrence_key="
        "dsl.occurrence_key(row.name, now), scheduled_for=now, status='error', request_id='sched-' + 'f' * 32, "
        f"error={LONG_ERROR!r}, claimed_at=now, attempted_at=now, started_at=now, finished_at=now);"
        "Schedule.objects.filter(pk=row.pk).update(last_run=run, consecutive_failures=12)"
    )
    live.stack.manage("shell", "-c", code)


def test_the_lists_fit_a_1280px_window_and_run_now_is_at_the_top(oslo: BrowserContext, live: Live, room: str) -> None:
    instance = f"customer-support-eu-west-escalations-{room}"
    seed_failing_schedule(live, instance)
    admin = oslo.new_page()
    admin.set_viewport_size({"width": 1280, "height": 800})
    for listing in ("schedule", "schedulerun"):
        admin.goto(f"{live.http}/admin/agents_app/{listing}/")
        # Long values are cut in the list, whole in their titles.
        row = admin.locator(f"#result_list tbody tr:has([title='demo-agent/{instance}'])")
        expect(row).to_have_count(1)
        sizes = admin.evaluate("""() => {
            const results = document.querySelector("#changelist .results");
            return {table: results.querySelector("table").scrollWidth, results: results.clientWidth,
                    page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth};
        }""")
        assert sizes["table"] <= sizes["results"], f"{listing}: the table scrolls sideways: {sizes}"
        assert sizes["page"] <= sizes["window"], f"{listing}: the page scrolls sideways: {sizes}"
        expect(row.locator(".run-error [title]")).to_have_attribute("title", LONG_ERROR)

    admin.goto(f"{live.http}/admin/agents_app/schedule/")
    admin.locator(f"#result_list tbody tr:has([title='{LONG_NAME}'])").locator(".field-schedule_name a").click()
    run_now = admin.locator("#run-now-form input[type=submit]")
    expect(run_now).to_be_in_viewport()
    button, fields = run_now.bounding_box(), admin.locator("#schedule_form fieldset").first.bounding_box()
    assert button is not None and fields is not None and button["y"] + button["height"] <= fields["y"]
