"""The chat page with a real provider protocol: the model's reasoning shows, and goes back as the provider needs it.

One live stack per reasoning protocol (Anthropic Messages, OpenAI Responses, an OpenAI-compatible
server), its ``AGENT_MODEL`` pointed at the local server speaking it (``tests/support/fake_*_server.py``)
in this process. The page's own message builder keeps what arrives with ``reasoning-end`` (Anthropic's
signature, the Responses reasoning item's id and encrypted content), and the next request it sends
carries the reasoning back: signed where the provider signs it, as ``reasoning_content`` on Chat
Completions (``Protocol.signed_reasoning``).
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.pages import PASSWORD, USERNAME, Live, login, open_chat, send_message
from tests.support.fake_provider import ScriptedServer, TextReply
from tests.support.live import LiveStack, RedisServer
from tests.support.provider_protocols import API_KEY, PROTOCOLS, REASONING_PROTOCOLS, Protocol

pytestmark = pytest.mark.browser

THINKING = ["The user ", "says hello; ", "I greet back."]


@pytest.fixture(scope="module", params=REASONING_PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> Protocol:
    return PROTOCOLS[request.param]


@pytest.fixture(scope="module")
def provider(protocol: Protocol) -> Iterator[ScriptedServer]:
    with protocol.server() as server:
        yield server


@pytest.fixture(scope="module")
def provider_live(
    tmp_path_factory: pytest.TempPathFactory, protocol: Protocol, provider: ScriptedServer
) -> Iterator[Live]:
    workdir: Path = tmp_path_factory.mktemp(f"{protocol.key}-stack")
    redis = RedisServer(workdir)
    stack = LiveStack(
        workdir,
        redis.url,
        extra_env={
            "AGENT_MODEL": protocol.spec,
            "AGENT_MODEL_BASE_URL": provider.base_url,
            "AGENT_MODEL_API_KEY": API_KEY,
        },
    )
    try:
        stack.create_user(USERNAME, PASSWORD)
        yield Live(stack, stack.start_server())
    finally:
        stack.stop()
        redis.stop()


@pytest.fixture
def provider_page(browser: Browser, provider_live: Live) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    login(page, provider_live)
    yield page
    context.close()


def test_thinking_shows_in_the_page_and_the_next_request_sends_it_back_signed(
    provider_page: Page, provider_live: Live, provider: ScriptedServer, protocol: Protocol
) -> None:
    page = provider_page
    provider.script(TextReply(["Hello to you!"], reasoning=THINKING), TextReply(["Bye!"]))
    open_chat(page, provider_live, "thinking")

    send_message(page, "hello")

    expect(page.locator(".msg.assistant .part.text")).to_have_text("Hello to you!")
    reasoning = page.locator(".msg.assistant details.reasoning")
    expect(reasoning.locator("summary")).to_have_text("Reasoning")
    expect(reasoning.locator(".reasoning-text")).to_have_text("".join(THINKING))
    expect(page.locator("#demo-badge")).to_be_hidden()

    # No reload: the history the page sends is the one its own builder made from the chunks.
    send_message(page, "bye")
    expect(page.locator(".msg.assistant .part.text").last).to_have_text("Bye!")
    _, second = provider.requests
    text = "".join(THINKING)
    assert protocol.replayed_reasoning(second) == [protocol.signed_reasoning(text)]

    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(page.locator(".msg.assistant details.reasoning .reasoning-text")).to_have_text(text)
