"""Attaching files in the chat page: they go as ``file`` parts, show in the user's message, are stored.

The page sends what useAgentChat's ``sendMessage({text, files})`` sends: the files as data: URLs in
``file`` parts before the text (their way to each provider: tests/integration/test_provider_protocols.py).
The live server runs the offline demo model, which answers the text and ignores the file.
"""

import base64
import json

import pytest
from playwright.sync_api import Page, expect

from tests.browser.pages import ECHO, FrameTap, Live, open_chat
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
DATA_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def test_attach_an_image_send_it_and_see_it_after_a_reload(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)

    page.set_input_files("#attach", files=[{"name": "pixel.png", "mimeType": "image/png", "buffer": PNG}])
    page.fill("#input", "what is this?")
    page.click("#send")

    expect(page.locator(".msg.assistant .part.text")).to_have_text(ECHO + "what is this?")
    image = page.locator(".msg.user .part.file img")
    expect(image).to_have_attribute("src", DATA_URL)
    expect(image).to_have_attribute("alt", "pixel.png")
    sent = wait_until(lambda: tap.sent("cf_agent_use_chat_request"), "the request", timeout=10)
    [user] = json.loads(sent[0]["init"]["body"])["messages"]
    assert user["parts"] == [
        {"type": "file", "mediaType": "image/png", "filename": "pixel.png", "url": DATA_URL},
        {"type": "text", "text": "what is this?"},
    ]
    assert page.eval_on_selector("#attach", "el => el.files.length") == 0, "the input is cleared once sent"

    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(page.locator(".msg.user .part.file img")).to_have_attribute("src", DATA_URL)


def test_a_file_above_the_limit_is_refused_with_a_banner(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    big = PNG + bytes(2 * 1024 * 1024)

    page.set_input_files("#attach", files=[{"name": "big.png", "mimeType": "image/png", "buffer": big}])
    page.fill("#input", "too big?")
    page.click("#send")

    expect(page.locator("#error")).to_contain_text("File 'big.png' in message")
    expect(page.locator("#error")).to_contain_text("AGENT_MAX_FILE_BYTES")
