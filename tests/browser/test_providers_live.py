"""The chat page with a real provider protocol: Anthropic's thinking shows, and goes back signed.

A live stack of its own whose ``AGENT_MODEL`` is an ``anthropic:`` model pointed at the local
Anthropic server (``tests/support/fake_anthropic_server.py``) in this process. The page's own
message builder keeps the thinking block's signature, which arrives with ``reasoning-end``, and
the next request it sends carries it back to the model.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.pages import PASSWORD, USERNAME, Live, login, open_chat, send_message
from tests.support.fake_anthropic_server import FakeAnthropicServer, signature_of
from tests.support.fake_provider import TextReply
from tests.support.live import LiveStack, RedisServer
from tests.support.provider_protocols import API_KEY

pytestmark = pytest.mark.browser

THINKING = ["The user ", "says hello; ", "I greet back."]


@pytest.fixture(scope="module")
def anthropic() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as server:
        yield server


@pytest.fixture(scope="module")
def anthropic_live(tmp_path_factory: pytest.TempPathFactory, anthropic: FakeAnthropicServer) -> Iterator[Live]:
    workdir: Path = tmp_path_factory.mktemp("anthropic-stack")
    redis = RedisServer(workdir)
    stack = LiveStack(workdir, redis.url, extra_env={
        "AGENT_MODEL": "anthropic:claude-sonnet-4-5", "AGENT_MODEL_BASE_URL": anthropic.base_url,
        "AGENT_MODEL_API_KEY": API_KEY,
    })
    try:
        stack.create_user(USERNAME, PASSWORD)
        yield Live(stack, stack.start_server())
    finally:
        stack.stop()
        redis.stop()


@pytest.fixture
def anthropic_page(browser: Browser, anthropic_live: Live) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    login(page, anthropic_live)
    yield page
    context.close()


def test_thinking_shows_in_the_page_and_the_next_request_sends_it_back_signed(
    anthropic_page: Page, anthropic_live: Live, anthropic: FakeAnthropicServer,
) -> None:
    page = anthropic_page
    anthropic.script(TextReply(["Hello to you!"], reasoning=THINKING), TextReply(["Bye!"]))
    open_chat(page, anthropic_live, "thinking")

    send_message(page, "hello")

    expect(page.locator(".msg.assistant .part.text")).to_have_text("Hello to you!")
    reasoning = page.locator(".msg.assistant details.reasoning")
    expect(reasoning.locator("summary")).to_have_text("Reasoning")
    expect(reasoning.locator(".reasoning-text")).to_have_text("".join(THINKING))
    expect(page.locator("#demo-badge")).to_be_hidden()

    # No reload: the history the page sends is the one its own builder made from the chunks.
    send_message(page, "bye")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text("Bye!")
    _, second = anthropic.requests
    assistant = next(m for m in second.body["messages"] if m["role"] == "assistant")
    text = "".join(THINKING)
    assert assistant["content"][0] == {"type": "thinking", "thinking": text, "signature": signature_of(text)}

    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(page.locator(".msg.assistant details.reasoning .reasoning-text")).to_have_text(text)
