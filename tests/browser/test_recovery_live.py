"""The chat page while a turn is recovered: "recovering…", then the continued reply (issue: chat
recovery, "Frames and page").

A stack of its own with the test agents: ``StallAgent`` streams three words and then goes silent,
so its 0.3 s stall watchdog cuts the turn into recovery, whose continuation finishes the reply.
"""

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.browser.pages import PASSWORD, USERNAME, Live, assistant_texts, send_message
from tests.support.live import LiveStack, RedisServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser

# Every text the status line shows, in order (the page's own observer).
WATCH_STATUS = """() => {
  window.statuses = [];
  const status = document.querySelector('#status');
  new MutationObserver(() => window.statuses.push(status.textContent))
    .observe(status, {childList: true, characterData: true, subtree: true});
}"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("recovery-browser")
    redis = RedisServer(workdir)
    stack = LiveStack(workdir, redis.url, extra_env={"DJANGO_SETTINGS_MODULE": "tests.support.settings_live"})
    try:
        stack.create_user(USERNAME, PASSWORD)
        yield Live(stack, stack.start_server())
    finally:
        stack.stop()
        redis.stop()


def test_a_stalled_reply_shows_recovering_then_the_continued_reply(page: Page, live: Live, room: str) -> None:
    page.goto(live.chat_url(room, agent="stall-agent"))
    page.wait_for_selector("#chat[data-ready=true]")
    expect(page.locator("#status")).to_have_text("connected")
    page.evaluate(WATCH_STATUS)
    send_message(page, "go")
    wait_until(lambda: assistant_texts(page) == ["one two three four."], "the continued reply", timeout=10.0,
               interval=0.02, page=page)
    expect(page.locator("#status")).to_have_text("connected")
    statuses = page.evaluate("window.statuses")
    assert "recovering…" in statuses, statuses
    assert statuses.index("recovering…") < len(statuses) - 1  # and it went away
    # One assistant message: the continuation went on in the cut reply.
    expect(page.locator(".msg.assistant")).to_have_count(1)
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    assert assistant_texts(page) == ["one two three four."]
