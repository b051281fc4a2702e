"""Tools end to end: the chat page against a live server with the demo agent and offline model.

The offline model calls a tool for ``/tool NAME {json}`` and then summarises the result. These
tests click what a user clicks (Approve, Reject), let the page run its client tool, watch
progress while a tool works, and check that a tool call and the model's follow-up form one
assistant message, live, in a second tab, and after a reload.
"""

import json
import re
from typing import Any

import pytest
from playwright.sync_api import BrowserContext, Locator, Page, expect

from tests.browser.pages import RESP, Frame, FrameTap, Live, assistant_texts, open_chat, send_message, user_texts

pytestmark = pytest.mark.browser

SEND_EMAIL = '/tool send_email {"to": "bob@example.com", "subject": "hi"}'
EMAIL_OUTPUT = "Email to bob@example.com about 'hi' sent (demo)."
APPROVED_TEXT = f"send_email returned {EMAIL_OUTPUT}"
DENIED_TEXT = "The call to send_email was denied: The tool call was denied."

# JS: watch #messages and record, on every change, how many assistant messages there are and
# what the (first) tool card shows. Installed after the page is ready, before the user acts.
WATCH = """() => {
  const list = document.getElementById('messages');
  const text = (root, sel) => { const n = root && root.querySelector(sel); return n ? n.textContent : null; };
  const w = { maxAssistant: 0, snaps: [] };
  window.__watch = w;
  const record = () => {
    w.maxAssistant = Math.max(w.maxAssistant, list.querySelectorAll('.msg.assistant').length);
    const card = list.querySelector('.part.tool');
    const snap = {
      assistants: list.querySelectorAll('.msg.assistant').length,
      state: card ? card.dataset.state : null,
      label: text(card, '.tool-state'),
      buttons: card ? card.querySelectorAll('.tool-actions button').length : 0,
      preliminary: text(card, '.tool-io.progress pre'),
      output: text(card, '.tool-io.output pre'),
      data: text(list, '.part.data[data-type="data-progress"] .data-value'),
      text: [...list.querySelectorAll('.msg.assistant .part.text')].map(t => t.textContent).join(''),
      status: document.getElementById('status').dataset.state,
    };
    const last = w.snaps[w.snaps.length - 1];
    if (!last || JSON.stringify(last) !== JSON.stringify(snap)) w.snaps.push(snap);
  };
  new MutationObserver(record).observe(list, { childList: true, subtree: true, characterData: true });
  record();
}"""


def watch(page: Page) -> None:
    page.evaluate(WATCH)


def watched(page: Page) -> dict[str, Any]:
    return page.evaluate("() => window.__watch")


def reload(page: Page) -> None:
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    page.wait_for_selector("#status[data-state=connected]")


def tool_card(page: Page, tool: str) -> Locator:
    return page.locator(f".msg.assistant .part.tool[data-tool={tool}]")


def chunks(frames: list[Frame], request_id: str | None = None) -> list[Frame]:
    """The UIMessageChunks in ``frames`` (of one request, if given)."""
    out = []
    for f in frames:
        if f.get("type") == RESP and f.get("body") and (request_id is None or f.get("id") == request_id):
            out.append(json.loads(f["body"]))
    return out


def assert_each_chunk_once(frames: list[Frame]) -> None:
    """What one socket received: every chunk of a stream once, and one terminal frame per stream.

    The server promises this (``streaming.handshake``: a replay and the live frames it held back
    add up to every chunk once, in order), so the page never has to guess what a repeat means.
    One exception, as the reference behaves (docs/protocol.md#late-ack): a stream that ended
    while the socket's resume ACK was on its way ends live, and the late ACK then gets an empty
    replayed ``done`` (no chunk; the same message ids as the live one), which the client ignores.
    """
    seen: dict[tuple[str, int], Frame] = {}
    terminal: dict[str, list[Frame]] = {}
    for frame in frames:
        if frame.get("type") != RESP:
            continue
        if frame.get("done"):
            ends = terminal.setdefault(frame["id"], [])
            late_ack_echo = bool(ends) and frame.get("replay") and frame.get("body") == ""
            if late_ack_echo:
                assert frame.get("messageIds") == ends[0].get("messageIds"), (ends[0], frame)
            else:
                ends.append(frame)
        elif isinstance(frame.get("seq"), int) and frame.get("body"):
            key = (frame["id"], frame["seq"])
            assert key not in seen, f"chunk {key} sent twice to one socket: {seen[key]} then {frame}"
            seen[key] = frame
    repeated = {rid: ends for rid, ends in terminal.items() if len(ends) > 1}
    assert not repeated, f"streams closed more than once on one socket: {repeated}"


def stored_assistant(page: Page) -> list[dict[str, Any]]:
    return [m for m in page.evaluate("() => window.thinkChat.messages()") if m["role"] == "assistant"]


def expect_approval_card(page: Page) -> Locator:
    card = tool_card(page, "send_email")
    expect(card).to_have_attribute("data-state", "approval-requested")
    expect(card.locator(".tool-state")).to_have_text("needs approval")
    expect(card.locator(".tool-io.input pre")).to_contain_text('"to": "bob@example.com"')
    expect(card.locator("button.approve")).to_be_enabled()
    expect(card.locator("button.reject")).to_be_enabled()
    # The first turn is over: the page waits for the user, not for the server.
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    return card


def expect_approved_message(page: Page) -> None:
    """The approved call and the model's follow-up, in one assistant message."""
    expect(page.locator(".msg.assistant").last.locator(".part.text")).to_have_text(APPROVED_TEXT)
    expect(page.locator(".msg.assistant")).to_have_count(1)
    card = tool_card(page, "send_email")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card.locator(".tool-state")).to_have_text("done")
    expect(card.locator(".tool-io.output pre")).to_have_text(json.dumps(EMAIL_OUTPUT))
    expect(card.locator(".tool-actions")).to_have_count(0)
    expect(page.locator(".msg.assistant .part.text")).to_have_text(APPROVED_TEXT)
    expect(page.locator(".msg-error")).to_have_count(0)
    expect(page.locator("#status")).to_have_text("connected")


def test_approve_runs_the_tool_and_continues_in_one_message(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    watch(page)
    send_message(page, SEND_EMAIL)
    card = expect_approval_card(page)
    message_id = page.locator(".msg.assistant").get_attribute("data-id")
    # Nothing ran yet.
    assert not [c for c in chunks(tap.inbound) if c["type"] == "tool-output-available"]

    card.locator("button.approve").click()
    expect_approved_message(page)
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator("#error")).to_be_hidden()
    approvals = tap.sent("cf_agent_tool_approval")
    assert approvals == [{"type": "cf_agent_tool_approval", "toolCallId": card.get_attribute("data-tool-call-id"),
                          "approved": True, "autoContinue": True}]
    # Never two assistant bubbles for the turn, not even for a moment.
    assert watched(page)["maxAssistant"] == 1
    assert page.locator(".msg.assistant").get_attribute("data-id") == message_id
    assert_each_chunk_once(tap.inbound)

    reload(page)
    expect_approved_message(page)
    assert page.locator(".msg.assistant").get_attribute("data-id") == message_id
    assert user_texts(page) == [SEND_EMAIL]
    assert assistant_texts(page) == [APPROVED_TEXT]


def test_reject_denies_the_call_and_the_tool_never_runs(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    watch(page)
    send_message(page, SEND_EMAIL)
    card = expect_approval_card(page)
    call_id = card.get_attribute("data-tool-call-id")

    card.locator("button.reject").click()

    def expect_denied() -> None:
        expect(page.locator(".msg.assistant").last.locator(".part.text")).to_have_text(DENIED_TEXT)
        expect(page.locator(".msg.assistant")).to_have_count(1)
        denied = tool_card(page, "send_email")
        expect(denied).to_have_attribute("data-state", "output-denied")
        expect(denied.locator(".tool-state")).to_have_text("denied")
        expect(denied.locator(".tool-note")).to_have_text("The call was rejected.")
        expect(denied.locator(".tool-io.output")).to_have_count(0)
        expect(denied.locator(".tool-actions")).to_have_count(0)
        expect(page.locator(".msg.assistant .part.text")).to_have_text(DENIED_TEXT)
        expect(page.locator("#status")).to_have_text("connected")
        (part,) = [p for p in stored_assistant(page)[0]["parts"] if p.get("toolCallId") == call_id]
        assert part["state"] == "output-denied"
        assert "output" not in part
        assert part["approval"]["approved"] is False

    expect_denied()
    assert tap.sent("cf_agent_tool_approval") == [
        {"type": "cf_agent_tool_approval", "toolCallId": call_id, "approved": False, "autoContinue": True}
    ]
    # The tool never ran: no output (final or preliminary) for the call was ever streamed.
    assert not [c for c in chunks(tap.inbound) if c.get("toolCallId") == call_id and c["type"].startswith("tool-output")
                and c["type"] != "tool-output-denied"]
    assert "sent (demo)" not in page.locator("#messages").inner_text()
    assert watched(page)["maxAssistant"] == 1
    assert_each_chunk_once(tap.inbound)

    reload(page)
    expect_denied()
    assert assistant_texts(page) == [DENIED_TEXT]


def test_client_tool_runs_in_the_browser_and_the_model_sees_its_output(page: Page, live: Live, room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    watch(page)
    browser = page.evaluate(
        "() => ({userAgent: navigator.userAgent, language: navigator.language,"
        " timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone})"
    )
    send_message(page, "/tool getBrowserInfo")

    card = tool_card(page, "getBrowserInfo")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(page.locator(".msg.assistant").last.locator(".part.text")).to_contain_text("getBrowserInfo returned ")
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    # The page answered by itself, once, with what this browser is.
    results = tap.sent("cf_agent_tool_result")
    assert len(results) == 1
    assert results[0]["toolCallId"] == card.get_attribute("data-tool-call-id")
    assert results[0]["toolName"] == "getBrowserInfo"
    assert results[0]["output"] == browser
    assert results[0]["autoContinue"] is True
    assert [t["name"] for t in results[0]["clientTools"]] == ["getBrowserInfo"]

    def expect_final() -> None:
        expect(page.locator(".msg.assistant")).to_have_count(1)
        expect(card.locator(".tool-state")).to_have_text("done")
        assert json.loads(card.locator(".tool-io.output pre").text_content() or "") == browser
        (text,) = assistant_texts(page)
        match = re.fullmatch(r"getBrowserInfo returned (\{.*\})\.", text)
        assert match, text
        assert json.loads(match.group(1)) == browser
        assert browser["userAgent"] in text
        expect(page.locator(".msg-error")).to_have_count(0)

    expect_final()
    assert watched(page)["maxAssistant"] == 1
    assert_each_chunk_once(tap.inbound)
    reload(page)
    expect_final()
    # A reload does not run the client tool again.
    page.wait_for_timeout(300)
    assert len(tap.sent("cf_agent_tool_result")) == 1


def test_progress_is_visible_while_a_tool_runs(page: Page, live: Live, room: str) -> None:
    # The tool reports a step every 50 ms. The page draws in a task after the frames it has, so
    # a busy browser can take a short run's frames in one go and skip straight to the output:
    # enough steps (1.5 s) leave it time to draw some of them whatever the machine's load.
    count = 30
    result = json.dumps({"done": count, "total": sum(range(1, count + 1))}, separators=(",", ":"))
    tap = FrameTap(page)
    open_chat(page, live, room)
    watch(page)
    send_message(page, f'/tool crunch_numbers {{"count": {count}}}')

    card = tool_card(page, "crunch_numbers")
    expect(page.locator(".msg.assistant").last.locator(".part.text")).to_have_text(
        f"crunch_numbers returned {result}."
    )
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card.locator(".tool-state")).to_have_text("done")
    expect(card.locator(".tool-io.progress")).to_have_count(0)
    assert json.loads(card.locator(".tool-io.output pre").text_content() or "") == json.loads(result)
    expect(page.locator(".part.data[data-type=data-progress] .data-value")).to_have_text(
        json.dumps({"done": count, "of": count}, separators=(",", ":"))
    )
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator("#status")).to_have_text("connected")

    snaps = watched(page)["snaps"]
    final = next(i for i, s in enumerate(snaps) if s["output"] is not None)
    before = snaps[:final]
    # While the tool ran (before its final output) the page showed its progress: the data part
    # and the preliminary outputs, with the card "in progress…" and the page streaming.
    progress = [json.loads(s["data"]) for s in before if s["data"]]
    preliminary = [json.loads(s["preliminary"]) for s in before if s["preliminary"]]
    assert progress and progress[0]["done"] < count, snaps
    assert all(p["of"] == count for p in progress)
    assert preliminary and preliminary[0]["done"] < count, snaps
    assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
    assert any(s["label"] == "in progress…" and s["status"] == "streaming" for s in before), snaps
    assert not any(s["text"] for s in before), "the follow-up text came before the tool's final output"
    assert watched(page)["maxAssistant"] == 1
    assert_each_chunk_once(tap.inbound)

    reload(page)
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(card.locator(".tool-io.output pre")).to_have_count(1)
    expect(card.locator(".tool-io.progress")).to_have_count(0)
    assert assistant_texts(page) == [f"crunch_numbers returned {result}."]


def test_second_tab_sees_the_approval_continuation_live(context: BrowserContext, page: Page, live: Live,
                                                        room: str) -> None:
    tap = FrameTap(page)
    open_chat(page, live, room)
    send_message(page, SEND_EMAIL)
    expect_approval_card(page)

    other = context.new_page()
    other_tap = FrameTap(other)
    history_loads: list[str] = []
    other.on("request", lambda r: history_loads.append(r.url) if r.url.endswith("/get-messages") else None)
    open_chat(other, live, room)
    expect_approval_card(other)
    watch(other)
    assert len(history_loads) == 1

    tool_card(page, "send_email").locator("button.approve").click()
    # The other tab follows the approval, the tool's output and the follow-up as they stream.
    expect_approved_message(other)
    expect_approved_message(page)
    assert len(history_loads) == 1, "the other tab caught up by reloading history, not live"
    updated = [f for f in other_tap.inbound if f.get("type") == "cf_agent_message_updated"]
    assert updated and [p["state"] for p in updated[0]["message"]["parts"] if p.get("toolCallId")] == \
        ["approval-responded"]
    continued = [f for f in other_tap.inbound if f.get("type") == RESP and f.get("continuation")]
    assert continued, "the other tab got no continuation frames"
    bodies = chunks(continued)
    assert {"tool-output-available", "text-delta"} <= {c["type"] for c in bodies}
    assert not other_tap.sent("cf_agent_tool_approval")
    snaps = watched(other)["snaps"]
    assert watched(other)["maxAssistant"] == 1
    # The other tab showed the buttons, then the approval (buttons gone), then the output.
    assert snaps[0]["buttons"] == 2, snaps
    first_output = next(i for i, s in enumerate(snaps) if s["output"])
    assert any(s["state"] == "approval-responded" and s["label"] == "approved" and s["buttons"] == 0
               for s in snaps[:first_output]), snaps
    ids = "els => els.map(e => e.dataset.id)"
    assert page.eval_on_selector_all(".msg", ids) == other.eval_on_selector_all(".msg", ids)
    assert_each_chunk_once(tap.inbound)
    assert_each_chunk_once(other_tap.inbound)



