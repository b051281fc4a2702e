"""The chat page against a live server with the offline demo model: what a user sees."""

import re

import pytest
from playwright.sync_api import BrowserContext, Dialog, Page, expect

from tests.browser.pages import (
    AGENT,
    ECHO,
    LAST_ASSISTANT_TEXT,
    USERNAME,
    FrameTap,
    Live,
    assistant_texts,
    login,
    open_chat,
    send_message,
    user_texts,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser



def slow_words(count: int) -> str:
    return "".join(f"w{i} " for i in range(count))


def test_login_send_stream_and_reload(context: BrowserContext, live: Live, room: str) -> None:
    context.clear_cookies()
    page = context.new_page()
    # Anonymous visitors are sent to the login form.
    page.goto(live.chat_url(room))
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
    login(page, live)
    expect(page.locator("#who")).to_have_text(USERNAME)
    # Open the conversation through the instance list's form.
    page.select_option("select[name=slug]", AGENT)
    page.fill("input[name=name]", room)
    page.click("form.row button[type=submit]")
    page.wait_for_url(live.chat_url(room))
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator("#demo-badge")).to_be_visible()
    expect(page.locator("#demo-badge")).to_have_text("offline demo model")
    expect(page.locator(".msg")).to_have_count(0)

    send_message(page, "hello there")
    expect(page.locator(".msg.user")).to_have_text(re.compile("hello there"))
    expect(page.locator(".msg.assistant .part.text")).to_have_text(ECHO + "hello there")
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator("#send")).to_be_enabled()

    # A slow reply is visible while it streams: partial text first, then the whole of it.
    send_message(page, "/slow 30 30")
    page.wait_for_function(
        f"() => {{ const t = ({LAST_ASSISTANT_TEXT})(); return t.includes('w2 ') && !t.includes('w29'); }}"
    )
    expect(page.locator("#status")).to_have_text("streaming")
    expect(page.locator("#send")).to_be_disabled()
    expect(page.locator("#stop")).to_be_enabled()
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile("w29"))
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator("#stop")).to_be_disabled()
    assert assistant_texts(page)[-1] == slow_words(30)

    # After a reload the history comes back from get-messages.
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(page.locator(".msg")).to_have_count(4)
    assert user_texts(page) == ["hello there", "/slow 30 30"]
    assert assistant_texts(page) == [ECHO + "hello there", slow_words(30)]
    expect(page.locator("#status")).to_have_text("connected")


def test_stop_keeps_partial_text_and_reenables_send(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    assert tap.sent("cf_agent_stream_resume_request"), "the page probes for a stream to resume on open"
    send_message(page, "/slow 400 25")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})().includes('w5 ')")
    page.click("#stop")
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#stop")).to_be_disabled()
    expect(page.locator("#status")).to_have_text("connected")
    request = tap.sent("cf_agent_use_chat_request")[-1]
    assert tap.sent("cf_agent_chat_request_cancel") == [
        {"type": "cf_agent_chat_request_cancel", "id": request["id"]}
    ]
    partial = assistant_texts(page)[-1]
    assert partial.startswith(slow_words(6))
    assert "w399" not in partial
    # Frames the server still sends for the stopped turn do not grow the text.
    page.wait_for_timeout(500)
    assert assistant_texts(page)[-1] == partial
    # The server ended the turn as aborted and kept a partial reply.
    terminal = [f for f in tap.inbound if f.get("id") == request["id"] and f.get("done")]
    assert terminal
    assert terminal[-1].get("outcome") == "aborted"

    # The page is usable again.
    send_message(page, "after stop")
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile(re.escape(ECHO + "after stop")))

    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    texts = assistant_texts(page)
    assert len(texts) == 2
    assert texts[0].startswith(slow_words(6))
    assert "w399" not in texts[0]
    assert texts[1] == ECHO + "after stop"


def test_clear_asks_first_then_empties_the_page_and_stays_empty(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    send_message(page, "remember me")
    expect(page.locator(".msg.assistant .part.text")).to_have_text(ECHO + "remember me")
    questions: list[str] = []

    def answer(dialog: Dialog, accept: bool) -> None:
        questions.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, accept=False))
    page.click("#clear")
    wait_until(lambda: len(questions) == 1, "the confirmation", timeout=10.0, interval=0.02, page=page)
    assert questions == ["Clear this conversation? Its messages are deleted for good, in every open tab."]
    expect(page.locator(".msg")).to_have_count(2)
    assert tap.sent("cf_agent_chat_clear") == []
    page.once("dialog", lambda dialog: answer(dialog, accept=True))
    page.click("#clear")
    expect(page.locator(".msg")).to_have_count(0)
    expect(page.locator("#messages .empty")).to_be_visible()
    page.wait_for_timeout(200)
    assert tap.sent("cf_agent_chat_clear") == [{"type": "cf_agent_chat_clear"}]
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    page.wait_for_selector("#status[data-state=connected]")
    expect(page.locator(".msg")).to_have_count(0)


def test_second_tab_sees_messages_and_reply_live(context: BrowserContext, page: Page, live: Live,
                                                 room: str) -> None:
    open_chat(page, live, room)
    other = context.new_page()
    open_chat(other, live, room)

    send_message(page, "/slow 20 60")
    # The other tab gets the user's message and the reply while it streams.
    expect(other.locator(".msg.user .part.text")).to_have_text("/slow 20 60")
    other.wait_for_function(
        f"() => {{ const t = ({LAST_ASSISTANT_TEXT})(); return t.includes('w1 ') && !t.includes('w19'); }}"
    )
    expect(other.locator("#status")).to_have_text("streaming")
    expect(other.locator(".msg.assistant").last).to_have_text(re.compile("w19"))
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile("w19"))
    expect(other.locator("#status")).to_have_text("connected")
    expect(other.locator(".msg")).to_have_count(2)
    assert assistant_texts(other) == assistant_texts(page) == [slow_words(20)]
    # Both tabs end with the same message ids (the server stamps the assistant id in start).
    ids = "els => els.map(e => e.dataset.id)"
    assert page.eval_on_selector_all(".msg", ids) == other.eval_on_selector_all(".msg", ids)

    # And the other way round, then a clear in one tab empties the other.
    send_message(other, "from the other tab")
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile(re.escape(ECHO + "from the other tab")))
    expect(page.locator(".msg")).to_have_count(4)
    other.once("dialog", lambda dialog: dialog.accept())
    other.click("#clear")
    expect(page.locator(".msg")).to_have_count(0)


def test_in_band_error_keeps_partial_text(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, "/fail")
    error = "The demo model failed on purpose (/fail)."
    # Shown under the message it cut short (not repeated in the page's error banner).
    expect(page.locator(".msg.assistant .msg-error")).to_have_text(error)
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator(".msg.assistant .part.text")).to_have_text("This reply will fail ")
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#status")).to_have_text("connected")
    send_message(page, "still there?")
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile(re.escape(ECHO + "still there?")))


def test_server_tool_renders_as_a_card(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, '/tool get_weather {"city":"Oslo"}')
    card = page.locator(".msg.assistant .part.tool[data-tool=get_weather]")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card.locator(".tool-name")).to_have_text("get_weather")
    expect(card.locator(".tool-io.input pre")).to_contain_text('"city": "Oslo"')
    expect(card.locator(".tool-io.output pre")).to_have_text('"Oslo: snow, -3°C"')
    expect(page.locator(".msg.assistant .part.text")).to_have_text("get_weather returned Oslo: snow, -3°C.")
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(page.locator(".part.tool[data-tool=get_weather]")).to_have_attribute("data-state", "output-available")


def test_model_text_is_escaped(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    payload = '<img src=x onerror="window.pwned=1"><b>bold</b>'
    send_message(page, payload)
    expect(page.locator(".msg.assistant .part.text")).to_have_text(ECHO + payload)
    assert page.locator("#messages img").count() == 0
    assert page.locator("#messages b").count() == 0
    assert page.evaluate("() => window.pwned") is None


def test_conversation_goes_on_after_a_tool_call_and_reload(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, '/tool get_weather {"city":"Oslo"}')
    expect(page.locator(".msg.assistant .part.text")).to_have_text("get_weather returned Oslo: snow, -3°C.")
    page.reload()
    page.wait_for_selector("#status[data-state=connected]")
    send_message(page, "and now?")
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile(re.escape(ECHO + "and now?")))
    expect(page.locator(".msg-error")).to_have_count(0)


def test_reload_mid_stream_resumes_the_reply(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, "/slow 40 50")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})().includes('w3 ')")
    page.reload()
    # The reply goes on after the reload (resume handshake), neither lost nor duplicated.
    page.wait_for_selector("#chat[data-ready=true]")
    page.wait_for_function(
        f"() => {{ const t = ({LAST_ASSISTANT_TEXT})(); return t.includes('w5 ') && !t.includes('w39'); }}"
    )
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile("w39"))
    expect(page.locator("#status")).to_have_text("connected")
    assert assistant_texts(page) == [slow_words(40)]
    assert user_texts(page) == ["/slow 40 50"]


def test_dropped_connection_mid_stream_resumes(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    send_message(page, "/slow 40 50")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})().includes('w3 ')")
    tap.drop()
    expect(page.locator("#status")).to_have_text("reconnecting…")
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile("w39"), timeout=15_000)
    expect(page.locator("#status")).to_have_text("connected")
    assert tap.sockets == 2
    acks = tap.sent("cf_agent_stream_resume_ack")
    assert [a["id"] for a in acks] == [tap.sent("cf_agent_use_chat_request")[0]["id"]]
    assert assistant_texts(page) == [slow_words(40)]
    expect(page.locator(".msg")).to_have_count(2)
