"""Agent actions in the chat page: reply attachments, approval descriptors, durable pauses.

The first tests script the socket (``FakeAgentServer``) to pin down how the page renders every
attachment shape and every outcome of a durable pause. The others run the demo agent on the live
stack: an approval-gated refund (inline Approve, docs/architecture.md#approval-gated-actions) and
one below the approval threshold, both attaching an email draft (docs/architecture.md#reply-attachments),
and a durable-pause deploy (docs/architecture.md#durable-pause) that staff approve from outside the
page while it watches.
"""

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.browser.pages import FakeAgentServer, Frame, Live, chunk, done, open_chat, send_message

pytestmark = pytest.mark.browser

DEPLOY = {
    "requestId": "req-1",
    "toolCallId": "d1",
    "action": "deploy_release",
    "summary": "Deploy a release",
    "input": {"version": "1.4.2"},
    "permissions": ["deploy:run"],
    "risk": "high",
    "kind": "durable-pause",
}
PAUSED = {"status": "paused", "executionId": "actpause_1", "action": "deploy_release",
          "message": "This action is awaiting human approval."}


def tool_card(page: Page, tool: str) -> Locator:
    return page.locator(f".msg.assistant .part.tool[data-tool={tool}]")


def attachment(page: Page, kind: str) -> Locator:
    return page.locator(f".msg.assistant .attachments .attachment[data-type={kind}]")


def reply(page: Page, fake: FakeAgentServer, bodies: list[Frame]) -> str:
    """Send a message and stream ``bodies`` as the reply; returns the request id."""
    send_message(page, "go")
    request_id = fake.wait_for("cf_agent_use_chat_request")["id"]
    for seq, body in enumerate(bodies):
        fake.send(chunk(request_id, body, seq))
    fake.send(done(request_id))
    expect(page.locator("#status")).to_have_text("connected")
    return request_id


def paused_message(output: Any) -> Frame:
    """The stored assistant message of a durable-pause call whose output is ``output``."""
    return {"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-deploy_release", "toolCallId": "d1", "state": "output-available",
         "input": {"version": "1.4.2"}, "output": output, "approvalDescriptor": DEPLOY},
        {"type": "text", "text": "Waiting for the deploy.", "state": "done"},
    ]}


def test_every_attachment_shape_renders_as_text_and_follows_metadata(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    attachments = [
        {"type": "email_draft", "subject": "Refund <b>A1</b>", "to": ["bob@example.com", "eve@example.com"],
         "body": "Hello Bob,\n\nyour refund is on its way.\n<img src=x onerror=alert(1)>"},
        {"type": "card", "title": "Order A1", "payload": {"status": "refunded", "amount": 250, "items": [1, 2]}},
        {"type": "voice_note", "url": "https://example.com/note.ogg", "text": "ignored when a url is given"},
        {"type": "voice_note", "url": "javascript:alert(1)", "text": "Your refund is on its way."},
        {"type": "poll", "question": "Happy?", "options": ["yes", "no"]},
        {"kind": "no type: ignored"},
    ]
    reply(page, fake, [
        {"type": "start", "messageId": "a1"}, {"type": "start-step"},
        {"type": "text-start", "id": "t"}, {"type": "text-delta", "id": "t", "delta": "Done."},
        {"type": "text-end", "id": "t"},
        {"type": "message-metadata", "messageMetadata": {"attachments": attachments}},
        {"type": "finish", "messageMetadata": {"finishReason": "stop"}},
    ])

    expect(page.locator(".msg.assistant .attachment")).to_have_count(5)
    # Under the message's parts, after its text.
    order = page.eval_on_selector_all(".msg.assistant .parts > *", "els => els.map(e => e.className)")
    assert order[-1] == "attachments", order
    email = attachment(page, "email_draft")
    expect(email.locator(".attachment-title")).to_have_text("Email draft")
    assert email.locator("dt").all_text_contents() == ["To", "Subject"]
    assert email.locator("dd").all_text_contents() == ["bob@example.com, eve@example.com", "Refund <b>A1</b>"]
    expect(email.locator(".attachment-body")).to_have_text(attachments[0]["body"])
    assert email.locator(".attachment-body").evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"
    assert page.locator(".msg.assistant b, .msg.assistant img").count() == 0

    card = attachment(page, "card")
    expect(card.locator(".attachment-title")).to_have_text("Order A1")
    assert card.locator("dt").all_text_contents() == ["status", "amount", "items"]
    assert card.locator("dd").all_text_contents() == ["refunded", "250", "[1,2]"]

    audio, spoken = attachment(page, "voice_note").all()
    expect(audio.locator(".attachment-title")).to_have_text("Voice note")
    expect(audio.locator("audio[controls]")).to_have_attribute("src", "https://example.com/note.ogg")
    expect(audio.locator(".attachment-body")).to_have_count(0)
    expect(spoken.locator("audio")).to_have_count(0)
    expect(spoken.locator(".attachment-body")).to_have_text("Your refund is on its way.")

    other = attachment(page, "poll")
    expect(other.locator(".attachment-title")).to_have_text("poll")
    assert json.loads(other.locator("pre").text_content() or "") == {"question": "Happy?", "options": ["yes", "no"]}

    # A transcript update carries the message's metadata: the cards follow it.
    fake.send({"type": "cf_agent_message_updated", "message": {
        "id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Done.", "state": "done"}],
        "metadata": {"attachments": [{"type": "email_draft", "subject": "Updated"}]},
    }})
    expect(page.locator(".msg.assistant .attachment")).to_have_count(1)
    expect(attachment(page, "email_draft").locator("dd")).to_have_text("Updated")
    expect(attachment(page, "email_draft").locator(".attachment-body")).to_have_count(0)


def test_an_inline_approval_shows_its_descriptor(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    descriptor = {**DEPLOY, "toolCallId": "r1", "action": "refund_order", "summary": "Refund an order",
                  "input": {"order_id": "A1", "amount": 250}, "permissions": ["refunds:write", "orders:read"],
                  "risk": "medium", "kind": "approval-gated"}
    reply(page, fake, [
        {"type": "start", "messageId": "a1"}, {"type": "start-step"},
        {"type": "tool-input-available", "toolCallId": "r1", "toolName": "refund_order",
         "input": {"order_id": "A1", "amount": 250}},
        {"type": "tool-approval-request", "approvalId": "ap1", "toolCallId": "r1", "approvalDescriptor": descriptor},
        {"type": "finish", "messageMetadata": {"finishReason": "tool-calls"}},
    ])
    card = tool_card(page, "refund_order")
    expect(card).to_have_attribute("data-state", "approval-requested")
    expect(card.locator(".approval-summary")).to_have_text("Refund an order")
    expect(card.locator(".risk")).to_have_text("medium risk")
    expect(card.locator(".risk")).to_have_attribute("data-risk", "medium")
    assert card.locator(".permission").all_text_contents() == ["refunds:write", "orders:read"]
    assert json.loads(card.locator(".tool-io.input pre").text_content() or "") == {"order_id": "A1", "amount": 250}
    expect(card.locator("button.approve")).to_be_enabled()

    card.locator("button.approve").click()
    fake.wait_for("cf_agent_tool_approval")
    # The descriptor stays on the card once the user decided.
    expect(card.locator(".tool-state")).to_have_text("approved")
    expect(card.locator(".approval-summary")).to_have_text("Refund an order")


@pytest.mark.parametrize(("output", "decision", "text"), [
    ("Deployed 1.4.2 to production.", "approved", "Approved: Deployed 1.4.2 to production."),
    ({"version": "1.4.2", "ok": True}, "approved", 'Approved: {"version":"1.4.2","ok":true}'),
    ({"status": "rejected", "executionId": "actpause_1", "action": "deploy_release", "reason": "not now"},
     "rejected", "Rejected: not now"),
    ({"status": "error", "executionId": "actpause_1",
      "error": 'Execution "actpause_1" is no longer pending — it was approved or rejected elsewhere.'},
     "error", 'Error: Execution "actpause_1" is no longer pending — it was approved or rejected elsewhere.'),
    ({"error": {"name": "ActionTimeoutError", "message": "Action timed out"}}, "error", "Error: Action timed out"),
])
def test_a_durable_pause_waits_for_staff_then_shows_their_decision(page: Page, live: Live, room: str, output: Any,
                                                                   decision: str, text: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    reply(page, fake, [
        {"type": "start", "messageId": "a1"}, {"type": "start-step"},
        {"type": "tool-input-available", "toolCallId": "d1", "toolName": "deploy_release",
         "input": {"version": "1.4.2"}},
        {"type": "tool-output-available", "toolCallId": "d1", "output": PAUSED, "approvalDescriptor": DEPLOY},
        {"type": "text-start", "id": "t"}, {"type": "text-delta", "id": "t", "delta": "Waiting for the deploy."},
        {"type": "text-end", "id": "t"}, {"type": "finish", "messageMetadata": {"finishReason": "stop"}},
    ])
    card = tool_card(page, "deploy_release")
    expect(card).to_have_attribute("data-decision", "paused")
    expect(card.locator(".tool-state")).to_have_text("paused")
    expect(card.locator(".tool-note.paused")).to_have_text("Waiting for approval by staff", use_inner_text=True)
    expect(card.locator(".approval-summary")).to_have_text("Deploy a release")
    expect(card.locator(".risk[data-risk=high]")).to_have_text("high risk")
    expect(card.locator(".execution-id")).to_have_text("actpause_1")
    expect(card.locator(".tool-io.output")).to_have_count(0)
    expect(card.locator(".tool-actions")).to_have_count(0)
    assert "awaiting human approval" not in card.inner_text()

    fake.send({"type": "cf_agent_message_updated", "message": paused_message(output)})
    expect(card).to_have_attribute("data-decision", decision)
    expect(card.locator(".tool-state")).to_have_text(decision)
    expect(card.locator(".tool-decision")).to_have_text(text)
    expect(card.locator(".approval-summary")).to_have_text("Deploy a release")
    expect(card.locator(".tool-note.paused")).to_have_count(0)
    expect(card.locator(".tool-io.output")).to_have_count(0)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Waiting for the deploy.")
    expect(page.locator(".msg.assistant")).to_have_count(1)


# ------------------------------------------------------------------ the demo agent, live
def reload(page: Page) -> None:
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    page.wait_for_selector("#status[data-state=connected]")


def expect_refund_email(page: Page, order_id: str, amount: str) -> None:
    email = attachment(page, "email_draft")
    expect(email).to_have_count(1)
    expect(email.locator(".attachment-title")).to_have_text("Email draft")
    assert email.locator("dd").all_text_contents() == ["customer@example.com", f"Your refund for order {order_id}"]
    expect(email.locator(".attachment-body")).to_have_text(f"We refunded {amount} EUR for order {order_id}.")


def test_approving_a_refund_runs_it_and_attaches_the_email_draft(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, '/tool refund_order {"order_id": "A1", "amount": 250}')
    card = tool_card(page, "refund_order")
    expect(card).to_have_attribute("data-state", "approval-requested")
    expect(card.locator(".approval-summary")).to_have_text("Refund an order")
    expect(card.locator(".risk[data-risk=medium]")).to_have_text("medium risk")
    assert card.locator(".permission").all_text_contents() == ["orders:refund"]
    assert json.loads(card.locator(".tool-io.input pre").text_content() or "") == {"order_id": "A1", "amount": 250}
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator(".attachment")).to_have_count(0)

    card.locator("button.approve").click()
    expect(card).to_have_attribute("data-state", "output-available")
    output = json.loads(card.locator(".tool-io.output pre").text_content() or "")
    assert output == {"refund_id": output["refund_id"], "order_id": "A1", "refunded": 250}
    expect(card.locator(".approval-summary")).to_have_text("Refund an order")
    expect_refund_email(page, "A1", "250.00")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator(".msg-error")).to_have_count(0)

    reload(page)
    expect(card.locator(".tool-io.output pre")).to_have_count(1)
    expect_refund_email(page, "A1", "250.00")


def test_a_small_refund_attaches_the_email_draft_at_once(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, '/tool refund_order {"order_id": "A2", "amount": 20}')
    card = tool_card(page, "refund_order")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card.locator(".tool-actions")).to_have_count(0)
    expect_refund_email(page, "A2", "20.00")
    expect(page.locator("#status")).to_have_text("connected")

    reload(page)
    expect(card).to_have_attribute("data-state", "output-available")
    expect_refund_email(page, "A2", "20.00")
    expect(page.locator(".msg.assistant")).to_have_count(1)


def test_staff_approve_a_paused_deploy_and_the_page_follows_live(page: Page, live: Live, room: str) -> None:
    open_chat(page, live, room)
    send_message(page, '/tool deploy_release {"version": "1.4.2"}')
    card = tool_card(page, "deploy_release")
    expect(card).to_have_attribute("data-decision", "paused")
    expect(card.locator(".tool-note.paused")).to_have_text("Waiting for approval by staff", use_inner_text=True)
    expect(card.locator(".approval-summary")).to_have_text("Deploy a release")
    expect(card.locator(".risk[data-risk=high]")).to_have_text("high risk")
    expect(card.locator(".execution-id")).to_have_text(re.compile(r"^actpause_"))
    expect(page.locator("#status")).to_have_text("connected")
    execution_id = card.locator(".execution-id").text_content() or ""
    history_loads: list[str] = []
    page.on("request", lambda r: history_loads.append(r.url) if r.url.endswith("/get-messages") else None)

    approve = ("from asgiref.sync import async_to_sync; from agents_app.approvals import service as approvals; "
               f"print(repr(async_to_sync(approvals.approve_execution)({execution_id!r})))")
    outcome = live.stack.manage("shell", "--no-imports", "-c", approve)
    assert outcome.strip() == repr("Deployed 1.4.2 to production.")

    expect(card).to_have_attribute("data-decision", "approved")
    expect(card.locator(".tool-decision")).to_have_text("Approved: Deployed 1.4.2 to production.")
    expect(card.locator(".tool-state")).to_have_text("approved")
    expect(card.locator(".approval-summary")).to_have_text("Deploy a release")
    expect(card.locator(".tool-note.paused")).to_have_count(0)
    assert not history_loads, "the page reloaded the history instead of following the update live"


def test_approving_the_older_of_two_parked_deploys_answers_about_that_deploy(page: Page, live: Live,
                                                                            room: str) -> None:
    """Staff approve the first of two parked deploys: the page shows the answer about 1.0.0 in a
    reply of its own after the latest, and the 2.0.0 reply is left as it was."""
    open_chat(page, live, room)
    cards = page.locator(".msg.assistant .part.tool[data-tool=deploy_release]")
    replies = page.locator(".msg.assistant")
    parked = "Asked staff to approve deploy_release."
    for index, version in enumerate(("1.0.0", "2.0.0")):
        send_message(page, f"deploy_release version {version}")
        expect(cards.nth(index)).to_have_attribute("data-decision", "paused")
        expect(replies.nth(index).locator(".part.text")).to_have_text(parked)
    expect(page.locator("#status")).to_have_text("connected")
    execution_id = cards.nth(0).locator(".execution-id").text_content() or ""

    approve = ("from asgiref.sync import async_to_sync; from agents_app.approvals import service as approvals; "
               f"print(repr(async_to_sync(approvals.approve_execution)({execution_id!r})))")
    deployed = live.stack.manage("shell", "--no-imports", "-c", approve).strip().strip("'")
    assert "1.0.0" in deployed

    expect(cards.nth(0)).to_have_attribute("data-decision", "approved")
    expect(replies).to_have_count(3)
    expect(replies.nth(2).locator(".part.text")).to_have_text(deployed)
    expect(replies.nth(1).locator(".part.text")).to_have_text(parked)
    expect(cards.nth(1)).to_have_attribute("data-decision", "paused")
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    expect(replies.nth(2).locator(".part.text")).to_have_text(deployed)
    expect(replies.nth(1).locator(".part.text")).to_have_text(parked)
