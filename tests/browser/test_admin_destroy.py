"""Destroying a conversation from the admin (``agents_app.lifecycle.admin``), in Chromium: the
instance page's Destroy button leads to a confirmation that says what goes, nothing is deleted
before it is confirmed, and then the conversation is gone, also from the chat page open on it.

The reference's ``destroy()`` deletes all of an agent's storage and closes its sockets; the next
connection meets a new, empty agent under the same name."""

import re

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.browser.pages import ECHO, Live, assistant_texts, open_chat, send_message

pytestmark = pytest.mark.browser


def instance_pk(live: Live, name: str) -> str:
    code = f"from agents_app.models import AgentInstance as A; print(A.objects.get(name={name!r}).pk)"
    return live.stack.manage("shell", "--no-imports", "-c", code).split()[-1]


def exists(live: Live, name: str) -> bool:
    code = f"from agents_app.models import AgentInstance as A; print(A.objects.filter(name={name!r}).exists())"
    return live.stack.manage("shell", "--no-imports", "-c", code).split()[-1] == "True"


def test_destroy_asks_first_then_deletes_the_conversation_and_empties_the_open_chat(
    page: Page, superuser_context: BrowserContext, live: Live, room: str
) -> None:
    """The reference's ``destroy()`` deletes an agent's stored state and closes its connections.
    The admin asks before it destroys (saying what would go; looking deletes nothing), then the
    open chat is emptied and its next message starts a new, empty conversation at the same address."""
    open_chat(page, live, room)
    send_message(page, "remember me")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text(f"{ECHO}remember me")
    pk = instance_pk(live, room)

    admin = superuser_context.new_page()
    admin.goto(f"{live.http}/admin/agents_app/agentinstance/{pk}/change/")
    admin.click("#destroy-instance")
    expect(admin.locator("h1")).to_have_text("Destroy this conversation?")
    expect(admin.locator("#destroy-summary")).to_contain_text(f"demo-agent/{room}")
    expect(admin.locator("#destroy-counts li").first).to_have_text("2 messages")
    # Looking at the confirmation deletes nothing; "No, take me back" returns to the instance.
    admin.click("text=No, take me back")
    expect(admin).to_have_url(re.compile(rf"/admin/agents_app/agentinstance/{pk}/change/$"))
    assert exists(live, room)

    admin.click("#destroy-instance")
    admin.click("#confirm-destroy")
    expect(admin).to_have_url(re.compile(r"/admin/agents_app/agentinstance/$"))
    expect(admin.locator(".messagelist .success")).to_contain_text(f"Destroyed demo-agent/{room}: 2 messages")
    assert not exists(live, room)

    # The chat page open on it was cleared and reconnects to the address, now a new, empty conversation.
    expect(page.locator(".msg")).to_have_count(0)
    page.wait_for_selector("#status[data-state=connected]")
    send_message(page, "a fresh start")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text(f"{ECHO}a fresh start")
    assert assistant_texts(page) == [f"{ECHO}a fresh start"]
