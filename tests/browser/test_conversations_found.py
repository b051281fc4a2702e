"""Finding one's way among conversations: opening an address makes nothing until the first message,
the index shows every conversation the user may open (their own, shared ones, and for staff the
conversations of schedules), and a sub-agent is linked from its parent's page as it is made."""

import re
import uuid

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.browser.pages import AGENT, ECHO, Live, assistant_texts, open_chat, send_message

pytestmark = pytest.mark.browser

CHILD = "research-agent"


def instance_count(live: Live, name: str) -> int:
    """How many ``AgentInstance`` rows (any namespace, any depth) have this name, read in the database."""
    code = f"from agents_app.models import AgentInstance as A; print(A.objects.filter(name={name!r}).count())"
    return int(live.stack.manage("shell", "--no-imports", "-c", code).strip())


def test_opening_an_address_makes_nothing_until_the_first_message(page: Page, live: Live) -> None:
    user = page  # alice: bob's list is test_conversations_live's to count
    parent, child = f"p-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    # A sub-agent's address under a parent nobody opened: an empty chat, connected, no error.
    user.goto(f"{live.http}/chat/{AGENT}/{parent}/sub/{CHILD}/{child}/")
    user.wait_for_selector("#chat[data-ready=true]")
    user.wait_for_selector("#status[data-state=connected]")
    expect(user.locator(".msg")).to_have_count(0)
    expect(user.locator("#error")).to_be_hidden()
    # The same for the top-level address, where get-messages answers the owner an empty list.
    open_chat(user, live, parent)
    expect(user.locator(".msg")).to_have_count(0)
    expect(user.locator("#error")).to_be_hidden()
    assert user.evaluate(f"fetch('/agents/{AGENT}/{parent}/get-messages').then(r => r.json())") == []
    user.goto(f"{live.http}/")
    expect(user.locator(f"#instances a[href='/chat/{AGENT}/{parent}/']")).to_have_count(0)
    assert instance_count(live, parent) == 0
    assert instance_count(live, child) == 0

    # The first message makes the conversation, and it is listed.
    open_chat(user, live, parent)
    send_message(user, "hello")
    expect(user.locator(".msg.assistant .part.text")).to_have_text(ECHO + "hello")
    assert instance_count(live, parent) == 1
    user.goto(f"{live.http}/")
    expect(user.locator(f"#instances a[href='/chat/{AGENT}/{parent}/']")).to_have_count(1)


def test_a_second_tab_on_a_new_name_sees_the_first_message_of_another(context: BrowserContext, live: Live,
                                                                      room: str) -> None:
    first, second = context.new_page(), context.new_page()
    open_chat(first, live, room)
    open_chat(second, live, room)
    send_message(first, "made by the first tab")
    # Once shown, the reply stays: nothing of the turn older than the second tab's transcript
    # follows it (docs/architecture.md#per-user-namespaces).
    expect(second.locator(".msg.assistant .part.text")).to_have_text([ECHO + "made by the first tab"])
    assert assistant_texts(second) == [ECHO + "made by the first tab"]


def add_schedule(admin: Page, live: Live, room: str) -> None:
    """An operator's daily prompt on conversation ``room`` (the global namespace), through the admin."""
    admin.goto(f"{live.http}/admin/")
    admin.get_by_role("link", name="Scheduled prompts").click()
    admin.get_by_role("link", name="Add scheduled prompt").click()
    admin.fill("#id_name", "daily-report")
    admin.select_option("#id_agent", AGENT)
    admin.fill("#id_instance_name", room)
    admin.fill("#id_prompt", "Generate the daily report.")
    admin.fill("#id_schedule", "every day at 09:00 in Europe/Oslo")
    admin.click("input[name=_save]")
    expect(admin.locator("#result_list tbody tr").filter(has_text=f"{AGENT}/{room}")).to_have_count(1)


def test_staff_find_the_conversations_of_schedules_in_the_index(page: Page, superuser_context: BrowserContext,
                                                               live: Live, room: str) -> None:
    staff = superuser_context.new_page()
    add_schedule(staff, live, room)
    staff.goto(f"{live.http}/")
    address = f"a[href='/chat/{AGENT}/{room}/?owner=']"
    scheduled = staff.locator(f"#scheduled-instances {address}")
    expect(scheduled).to_have_count(1)
    expect(staff.locator("#scheduled-instances li", has=staff.locator(address))).to_contain_text("daily-report")
    # Not listed among staff's own, and a user who may not open it does not see it at all.
    expect(staff.locator(f"#instances a[href^='/chat/{AGENT}/{room}/']")).to_have_count(0)
    page.goto(f"{live.http}/")
    expect(page.locator(f"a[href^='/chat/{AGENT}/{room}/']")).to_have_count(0)
    expect(page.locator("#scheduled-instances")).to_have_count(0)
    scheduled.click()
    staff.wait_for_url(f"{live.http}/chat/{AGENT}/{room}/?owner=")
    staff.wait_for_selector("#status[data-state=connected]")
    expect(staff.locator("#owner-note")).to_have_text("no owner")


def test_a_sub_agent_is_linked_as_it_is_made_and_shows_its_parent_as_the_sender(page: Page, live: Live,
                                                                               room: str) -> None:
    open_chat(page, live, room)
    send_message(page, 'research task "the history of Oslo"')
    card = page.locator(".msg.assistant .part.tool[data-tool=research]")
    expect(card).to_have_attribute("data-state", "output-available")
    call_id = card.get_attribute("data-tool-call-id")
    child_url = f"/chat/{AGENT}/{room}/sub/{CHILD}/research-{call_id}/"
    # Without a reload: the page's sub-agent links and the tool card both lead to the child.
    expect(page.locator(f"#sub-agents a[href='{child_url}']")).to_have_count(1)
    link = card.locator(f"a.sub-agent-link[href='{child_url}']")
    expect(link).to_have_count(1)
    expect(page.locator("#status")).to_have_text("connected")
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(link).to_have_count(1)
    link.click()
    page.wait_for_url(re.compile(re.escape(child_url) + "$"))
    page.wait_for_selector("#chat[data-ready=true]")
    task = page.locator(".msg.user")
    expect(task).to_have_count(1)
    expect(task.locator(".role")).to_have_text(AGENT)
    expect(task.locator(".part.text")).to_have_text("the history of Oslo")
