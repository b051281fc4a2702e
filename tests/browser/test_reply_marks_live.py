"""A failed or stopped reply keeps its mark on the chat page after a reload (live stack, demo model).

The page that saw the turn end marks the reply from the frames; a reloaded page knows only the
stored transcript, so the mark comes from the stored message's metadata.
"""

import pytest
from playwright.sync_api import Page, expect

from tests.browser.pages import ECHO, LAST_ASSISTANT_TEXT, FrameTap, Live, assistant_texts, open_chat, send_message
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser



def wait_for_terminal(tap: FrameTap, page: Page) -> dict[str, object]:
    """The terminal frame of the page's last request: the server has stored the reply by then."""
    request_id = tap.sent("cf_agent_use_chat_request")[-1]["id"]

    def terminal() -> dict[str, object] | None:
        ends = [f for f in tap.inbound if f.get("id") == request_id and f.get("done")]
        return ends[-1] if ends else None

    found: dict[str, object] = wait_until(terminal, f"the terminal frame of {request_id}", timeout=15, page=page)
    return found


def test_failed_reply_keeps_its_error_note_after_reload(page: Page, live: Live, room: str) -> None:
    """Right after the failure a reload replays the failed turn; once a later turn has ended, only
    the stored message can say that the first reply failed."""
    tap = FrameTap(page)
    open_chat(page, live, room)
    send_message(page, "/fail")
    error = "The demo model failed on purpose (/fail)."
    expect(page.locator(".msg.assistant .msg-error")).to_have_text(error)
    assert wait_for_terminal(tap, page).get("outcome") == "error"
    send_message(page, "still there?")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text(ECHO + "still there?")
    wait_for_terminal(tap, page)

    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    replies = page.locator(".msg.assistant")
    expect(replies).to_have_count(2)
    expect(replies.first.locator(".part.text")).to_have_text("This reply will fail ")
    expect(replies.first.locator(".msg-error")).to_have_text(error)
    expect(replies.last.locator(".msg-error")).to_have_count(0)
    expect(page.locator("#error")).to_be_hidden()


def test_stopped_reply_keeps_its_stopped_mark_after_reload(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    send_message(page, "/slow 400 25")
    page.wait_for_function(f"() => ({LAST_ASSISTANT_TEXT})().includes('w5 ')")
    page.click("#stop")
    expect(page.locator(".msg.assistant .msg-stopped")).to_be_visible()
    assert wait_for_terminal(tap, page).get("outcome") == "aborted"
    partial = assistant_texts(page)[-1]
    # The page's next request carries its own copy of the stopped reply, which has no mark.
    send_message(page, "after stop")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text(ECHO + "after stop")
    wait_for_terminal(tap, page)

    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    replies = page.locator(".msg.assistant")
    expect(replies).to_have_count(2)
    expect(replies.first.locator(".msg-stopped")).to_have_text("Stopped before the end of the reply")
    expect(replies.first).to_have_attribute("data-stopped", "true")
    expect(replies.first.locator(".msg-error")).to_have_count(0)
    expect(replies.last.locator(".msg-stopped")).to_have_count(0)
    # The stored partial is at least what this page showed when it stopped listening.
    assert assistant_texts(page)[0].startswith(partial)
