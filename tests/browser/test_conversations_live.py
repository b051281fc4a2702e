"""What a new user, a second user and staff meet first in the chat: their own conversations, the
staff address, the stopped marker, a paused action without its envelope, the demo's starter
prompts, and the banner while the server is away."""

import json
import re

import pytest
from playwright.sync_api import BrowserContext, Page, WebSocketRoute, expect

from agents_app.demo.agents import DemoAgent
from tests.browser.pages import AGENT, ECHO, FakeAgentServer, Live, assistant_texts, open_chat, send_message, user_texts

pytestmark = pytest.mark.browser

DEPLOYED = "Deployed 1.4.2 to production."
# What a paused call's envelope (the model's, not the user's) would show if it leaked onto the page.
ENVELOPE_MARKS = ('"status"', "executionId", "Stop and wait", "awaiting human approval", "{")


def new_conversation(page: Page, live: Live, name: str) -> None:
    """From the instance list, as a user would: the agent, a name, "New conversation"."""
    page.goto(f"{live.http}/")
    page.select_option("#new-conversation select[name=slug]", AGENT)
    page.fill("#new-conversation input[name=name]", name)
    page.click("#new-conversation button[type=submit]")
    page.wait_for_url(f"{live.http}/chat/{AGENT}/{name}/")
    page.wait_for_selector("#status[data-state=connected]")


def test_two_users_each_open_default_without_seeing_each_other(page: Page, other_user_context: BrowserContext,
                                                               superuser_context: BrowserContext,
                                                               live: Live) -> None:
    bob = other_user_context.new_page()
    for who, text in ((page, "alice's secret"), (bob, "bob's secret")):
        new_conversation(who, live, "default")
        send_message(who, text)
        expect(who.locator(".msg.assistant .part.text")).to_have_text(ECHO + text)
    for who, text in ((page, "alice's secret"), (bob, "bob's secret")):
        who.reload()
        who.wait_for_selector("#chat[data-ready=true]")
        assert user_texts(who) == [text]
        assert assistant_texts(who) == [ECHO + text]
        who.goto(f"{live.http}/")
        expect(who.locator(f"#instances a[href='/chat/{AGENT}/default/']")).to_have_count(1)
    expect(bob.locator("#instances li")).to_have_count(1)  # only his own
    # Staff read Alice's at the explicit address, and see whose it is.
    staff = superuser_context.new_page()
    open_chat(staff, live, "default", query="?owner=alice")
    expect(staff.locator("#owner-note")).to_have_text("alice's conversation")
    assert user_texts(staff) == ["alice's secret"]


def test_new_conversation_without_a_name_gets_a_fresh_one(page: Page, live: Live) -> None:
    page.goto(f"{live.http}/")
    page.click("#new-conversation button[type=submit]")
    page.wait_for_url(re.compile(rf"/chat/{AGENT}/\d{{4}}-\d{{2}}-\d{{2}}-[0-9a-f]{{4}}/$"))
    page.wait_for_selector("#status[data-state=connected]")
    expect(page.locator(".msg")).to_have_count(0)


def test_a_stopped_reply_is_marked_in_every_tab(context: BrowserContext, page: Page, live: Live, room: str) -> None:
    other = context.new_page()
    open_chat(page, live, room)
    open_chat(other, live, room)
    send_message(page, "/slow 40 50")
    expect(other.locator(".msg.assistant .part.text")).to_contain_text("w3")
    page.click("#stop")
    for tab in (page, other):
        reply = tab.locator(".msg.assistant").last
        expect(reply).to_have_attribute("data-stopped", "true")
        expect(reply.locator(".msg-stopped")).to_have_text("Stopped before the end of the reply")
    expect(page.locator("#send")).to_be_enabled()
    send_message(page, "and now in full")
    expect(page.locator(".msg.assistant").last.locator(".part.text")).to_have_text(ECHO + "and now in full")
    expect(page.locator(".msg.assistant").last.locator(".msg-stopped")).to_have_count(0)
    expect(page.locator(".msg-stopped")).to_have_count(1)


def test_the_empty_chat_offers_the_demos_and_a_paused_deploy_never_shows_its_envelope(page: Page, live: Live,
                                                                                      room: str) -> None:
    open_chat(page, live, room)
    starters = page.locator("#starters .starter")
    expect(page.locator("#starters")).to_be_visible()
    labels = starters.all_text_contents()
    assert labels == [label for label, _ in DemoAgent.starter_prompts]
    assert {label.split(":")[0] for label in labels} >= {
        "Weather", "Send an email", "Refund 250 €", "Deploy a release", "Crunch numbers", "Browser info",
        "Research", "A slow reply", "A reply that fails"}
    page.click("#starters .starter:has-text('Deploy a release')")
    expect(page.locator("#input")).to_have_value("deploy_release version 1.4.2")
    page.click("#send")
    expect(page.locator("#starters")).to_be_hidden()
    card = page.locator(".msg.assistant .part.tool[data-tool=deploy_release]")
    expect(card).to_have_attribute("data-decision", "paused")
    expect(page.locator(".msg.assistant .part.text")).to_have_text(["Asked staff to approve deploy_release."])
    reply_shows_no_envelope(page)

    execution_id = card.locator(".execution-id").text_content() or ""
    approve = ("from asgiref.sync import async_to_sync; from agents_app.approvals import service as approvals; "
               f"print(repr(async_to_sync(approvals.approve_execution)({execution_id!r})))")
    assert live.stack.manage("shell", "--no-imports", "-c", approve).strip() == repr(DEPLOYED)
    expect(card).to_have_attribute("data-decision", "approved")
    expect(card.locator(".tool-decision")).to_have_text(f"Approved: {DEPLOYED}")
    expect(page.locator(".msg.assistant .part.text")).to_have_text(
        ["Asked staff to approve deploy_release.", DEPLOYED])
    reply_shows_no_envelope(page)
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(card).to_have_attribute("data-decision", "approved")
    reply_shows_no_envelope(page)


def reply_shows_no_envelope(page: Page) -> None:
    """The reply's words and the card's decision carry nothing of the envelope the model reads."""
    texts = [*page.locator(".msg.assistant .part.text").all_text_contents(),
             *page.locator(".msg.assistant .tool-decision, .msg.assistant .tool-note").all_text_contents()]
    assert texts
    for text in texts:
        assert not any(mark in text for mark in ENVELOPE_MARKS), text


def test_the_send_email_demo_takes_the_users_arguments(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    page.click("#starters .starter:has-text('Send an email')")
    page.fill("#input", 'send_email to bob@example.com subject "Lunch on Friday"')
    page.click("#send")
    card = page.locator(".msg.assistant .part.tool[data-tool=send_email]")
    expect(card).to_have_attribute("data-state", "approval-requested")
    shown = json.loads(card.locator(".tool-io.input pre").text_content() or "")
    assert shown == {"to": "bob@example.com", "subject": "Lunch on Friday"}


def test_a_banner_says_when_the_server_is_away_and_goes_when_it_is_back(page: Page, live: Live, room: str) -> None:
    down = {"now": False}

    def on_connect(server: FakeAgentServer, ws: WebSocketRoute) -> None:
        if down["now"]:
            ws.close(code=1011, reason="server down")
            return
        ws.send(json.dumps({"type": "cf_agent_identity", "name": room, "agent": AGENT}))

    fake = FakeAgentServer(page, on_connect=on_connect)
    open_chat(page, live, room)
    banner = page.locator("#connection")
    expect(banner).to_be_hidden()
    down["now"] = True
    fake.close(code=1011)
    expect(banner).to_be_visible()
    expect(banner.locator(".connection-text")).to_have_text(
        re.compile(r"^Connection to the server lost\. Reconnecting in \d+ s \(attempt \d+\)…$"))
    expect(page.locator("#send")).to_be_disabled()
    tries = len(fake.sockets)
    page.click("#retry-now")
    fake.wait_for_sockets(tries + 1)
    down["now"] = False
    expect(banner).to_be_visible()
    page.click("#retry-now")
    expect(banner).to_be_hidden()
    expect(page.locator("#status")).to_have_text("connected")
