"""The chat page's protocol handling, against a scripted WebSocket (``FakeAgentServer``).

The page and its HTTP (login, get-messages) come from the live server; only the socket is
scripted, so these tests pin down what the JS client does with frames the server will send
(resume handshake, continuations, approvals, client tools, progress parts, terminal closes).
"""

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Page, Route, WebSocketRoute, expect

from tests.browser.pages import (
    RESP,
    FakeAgentServer,
    Frame,
    Live,
    assistant_texts,
    chunk,
    done,
    open_chat,
    send_message,
    user_texts,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.browser


def text_reply(request_id: str, message_id: str | None, words: list[str], *, continuation: bool = False) -> list[Frame]:
    """The chunks of a plain text reply, as the server frames them (seq from 0)."""
    flags: dict[str, Any] = {"continuation": True} if continuation else {}
    start: Frame = {"type": "start"}
    if message_id:
        start["messageId"] = message_id
    bodies: list[Frame] = [start, {"type": "start-step"}, {"type": "text-start", "id": "t1"}]
    bodies += [{"type": "text-delta", "id": "t1", "delta": w} for w in words]
    bodies += [{"type": "text-end", "id": "t1"}, {"type": "finish-step"},
               {"type": "finish", "messageMetadata": {"finishReason": "stop"}}]
    return [chunk(request_id, body, seq, **flags) for seq, body in enumerate(bodies)]


def serve_history(page: Page, messages: list[Frame]) -> list[Frame]:
    """Answer get-messages with ``messages`` (the returned list; change it to change the answer)."""

    def handle(route: Route) -> None:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(messages))

    page.route(re.compile(r"/get-messages$"), handle)
    return messages


def user(message_id: str, text: str) -> Frame:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def assistant(message_id: str, text: str) -> Frame:
    return {"id": message_id, "role": "assistant",
            "parts": [{"type": "step-start"}, {"type": "text", "text": text, "state": "done"}]}


def test_request_shape_and_transcript_sync(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    probe = fake.wait_for("cf_agent_stream_resume_request")
    assert isinstance(probe["probeId"], str)
    assert probe["probeId"]

    send_message(page, "hi")
    request = fake.wait_for("cf_agent_use_chat_request")
    assert set(request) == {"type", "id", "init"}
    assert request["init"]["method"] == "POST"
    body = json.loads(request["init"]["body"])
    assert body["trigger"] == "submit-message"
    assert [(m["role"], m["parts"]) for m in body["messages"]] == [("user", [{"type": "text", "text": "hi"}])]
    assert body["clientTools"] == [{
        "name": "getBrowserInfo",
        "description": body["clientTools"][0]["description"],
        "parameters": {"type": "object", "properties": {}},
    }]
    user_id = body["messages"][0]["id"]
    rid = request["id"]

    frames = text_reply(rid, "a1", ["Hello ", "there"])
    for frame in frames[:4]:  # start, start-step, text-start, "Hello "
        fake.send(frame)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Hello ")
    expect(page.locator("#status")).to_have_text("streaming")
    # An authoritative transcript without the streaming message keeps it at the tail.
    fake.send({"type": "cf_agent_chat_messages", "messages": [user(user_id, "hi")]})
    for frame in frames[4:]:
        fake.send(frame)
    fake.send(done(rid, messageIds=[user_id]))
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Hello there")
    expect(page.locator(".msg")).to_have_count(2)
    expect(page.locator(".msg.assistant")).to_have_attribute("data-id", "a1")
    expect(page.locator("#status")).to_have_text("connected")

    # The next request carries the whole local transcript.
    send_message(page, "again")
    second = json.loads(fake.wait_for("cf_agent_use_chat_request", 2)["init"]["body"])
    assert [m["id"] for m in second["messages"]][:2] == [user_id, "a1"]
    assert second["messages"][1]["parts"] == [
        {"type": "step-start"}, {"type": "text", "text": "Hello there", "state": "done"},
    ]
    assert second["messages"][2]["parts"] == [{"type": "text", "text": "again"}]


def _resume_on(fake: FakeAgentServer, request_id: str) -> None:
    """From now on: a new socket gets a proactive resuming; a probe gets resuming with probeId."""

    def on_connect(server: FakeAgentServer, ws: WebSocketRoute) -> None:
        ws.send(json.dumps({"type": "cf_agent_stream_resuming", "id": request_id}))
        ws.send(json.dumps({"type": "cf_agent_identity", "name": "fake", "agent": "demo-agent"}))

    def on_frame(index: int, frame: Frame) -> None:
        if frame.get("type") == "cf_agent_stream_resume_request":
            fake.send({"type": "cf_agent_stream_resuming", "id": request_id, "probeId": frame["probeId"]}, index)

    fake.on_connect = on_connect
    fake.on_frame = on_frame


def test_dropped_socket_resumes_without_duplicating_text(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "tell me")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    frames = text_reply(rid, "a1", ["Hello ", "big ", "wide ", "world", "!"])
    for frame in frames[:5]:  # start, start-step, text-start, "Hello ", "big "
        fake.send(frame)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Hello big ")

    _resume_on(fake, rid)
    fake.close(code=1011, reason="server restart")
    expect(page.locator("#status")).to_have_text("reconnecting…")
    expect(page.locator("#send")).to_be_disabled()
    fake.wait_for_sockets(2)
    fake.wait_for("cf_agent_stream_resume_request", socket=1)
    fake.wait_for("cf_agent_stream_resume_ack", socket=1)
    page.wait_for_timeout(200)
    # Resuming arrived twice (proactive + probe answer): the page ACKs once per id per socket.
    assert fake.frames("cf_agent_stream_resume_ack", socket=1) == [{"type": "cf_agent_stream_resume_ack", "id": rid}]

    # Replay of everything stored so far, then live frames.
    for frame in frames[:7]:
        fake.send({**frame, "replay": True}, 1)
    fake.send({"body": "", "done": False, "id": rid, "type": RESP, "replay": True, "replayComplete": True}, 1)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Hello big wide world")
    for frame in frames[7:]:
        fake.send(frame, 1)
    fake.send(done(rid), 1)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Hello big wide world!")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator("#send")).to_be_enabled()


def test_reload_mid_stream_rebuilds_from_replay(page: Page, live: Live, room: str) -> None:
    serve_history(page, [user("u1", "tell me")])
    fake = FakeAgentServer(page)
    _resume_on(fake, "r-live")
    open_chat(page, live, room, connected=False)
    fake.wait_for("cf_agent_stream_resume_ack")
    expect(page.locator("#status")).to_have_text("streaming")
    frames = text_reply("r-live", "a1", ["one ", "two ", "three"])
    for frame in frames[:5]:
        fake.send({**frame, "replay": True})
    fake.send({"body": "", "done": False, "id": "r-live", "type": RESP, "replay": True, "replayComplete": True})
    for frame in frames[5:]:
        fake.send(frame)
    fake.send(done("r-live"))
    expect(page.locator(".msg.assistant .part.text")).to_have_text("one two three")
    expect(page.locator(".msg")).to_have_count(2)
    expect(page.locator("#status")).to_have_text("connected")

    # A replay of a finished stream after reload ends with done+replay and still builds once.
    page.reload()
    page.wait_for_selector("#chat[data-ready=true]")
    wait_until(lambda: len(fake.frames("cf_agent_stream_resume_ack")) >= 2, "second ACK", timeout=10.0, interval=0.02,
               page=page)
    for frame in frames:
        fake.send({**frame, "replay": True}, -1)
    fake.send({**done("r-live"), "replay": True})
    expect(page.locator(".msg.assistant .part.text")).to_have_text("one two three")
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator("#status")).to_have_text("connected")


def test_continuation_appends_and_replay_is_deduplicated_by_seq(page: Page, live: Live, room: str) -> None:
    serve_history(page, [user("u1", "go"), assistant("a1", "Before. ")])
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    frames = text_reply("k1", None, ["After ", "the ", "tool."], continuation=True)
    for frame in frames[:5]:
        fake.send(frame)
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator(".msg.assistant")).to_have_text(re.compile(r"Before\. After the $"))

    _resume_on(fake, "k1")
    fake.close(code=1011)
    fake.wait_for_sockets(2)
    fake.wait_for("cf_agent_stream_resume_ack", socket=1)
    for frame in frames[:6]:
        fake.send({**frame, "replay": True}, 1)
    fake.send({"body": "", "done": False, "id": "k1", "type": RESP, "replay": True, "replayComplete": True,
               "continuation": True}, 1)
    for frame in frames[6:]:
        fake.send(frame, 1)
    fake.send(done("k1", continuation=True), 1)
    expect(page.locator("#status")).to_have_text("connected")
    assert assistant_texts(page) == ["Before. After the tool."]
    expect(page.locator(".msg.assistant")).to_have_attribute("data-id", "a1")


def _stream_tool_call(fake: FakeAgentServer, rid: str, tool: str, call_id: str, tool_input: Frame,
                      extra: list[Frame] | None = None) -> None:
    bodies: list[Frame] = [
        {"type": "start", "messageId": "a1"}, {"type": "start-step"},
        {"type": "tool-input-start", "toolCallId": call_id, "toolName": tool},
        {"type": "tool-input-delta", "toolCallId": call_id, "inputTextDelta": json.dumps(tool_input)},
        {"type": "tool-input-available", "toolCallId": call_id, "toolName": tool, "input": tool_input},
        *(extra or []),
        {"type": "finish-step"}, {"type": "finish", "messageMetadata": {"finishReason": "tool-calls"}},
    ]
    for seq, body in enumerate(bodies):
        fake.send(chunk(rid, body, seq))
    fake.send(done(rid))


def test_tool_approval_and_continuation(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "delete it")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    _stream_tool_call(fake, rid, "delete_file", "c1", {"path": "/tmp/x"},
                      [{"type": "tool-approval-request", "approvalId": "ap1", "toolCallId": "c1"}])
    card = page.locator(".part.tool[data-tool-call-id=c1]")
    expect(card).to_have_attribute("data-state", "approval-requested")
    expect(card.locator(".tool-state")).to_have_text("needs approval")
    expect(card.locator(".tool-io.input pre")).to_contain_text('"path": "/tmp/x"')
    expect(page.locator("#status")).to_have_text("connected")

    def on_frame(index: int, frame: Frame) -> None:
        if frame.get("type") == "cf_agent_stream_resume_request":
            fake.send({"type": "cf_agent_stream_pending", "id": "k1", "probeId": frame["probeId"]})
            approved = {"id": "a1", "role": "assistant", "parts": [
                {"type": "step-start"},
                {"type": "tool-delete_file", "toolCallId": "c1", "state": "approval-responded",
                 "input": {"path": "/tmp/x"}, "approval": {"id": "ap1", "approved": True}},
            ]}
            fake.send({"type": "cf_agent_message_updated", "message": approved})
            fake.send({"type": "cf_agent_stream_resuming", "id": "k1"})
        elif frame.get("type") == "cf_agent_stream_resume_ack":
            bodies: list[Frame] = [
                {"type": "start"},
                {"type": "tool-output-available", "toolCallId": "c1", "output": {"deleted": "/tmp/x"}},
                {"type": "start-step"}, {"type": "text-start", "id": "t2"},
                {"type": "text-delta", "id": "t2", "delta": "Deleted /tmp/x."},
                {"type": "text-end", "id": "t2"}, {"type": "finish-step"}, {"type": "finish"},
            ]
            for seq, body in enumerate(bodies):
                fake.send(chunk("k1", body, seq, continuation=True, **({"replay": True} if seq < 2 else {})))
            fake.send(done("k1", continuation=True))

    fake.on_frame = on_frame
    card.locator("button.approve").click()
    approval = fake.wait_for("cf_agent_tool_approval")
    assert approval == {"type": "cf_agent_tool_approval", "toolCallId": "c1", "approved": True, "autoContinue": True}
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Deleted /tmp/x.")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card.locator(".tool-io.output pre")).to_contain_text('"deleted": "/tmp/x"')
    expect(card.locator("button.approve")).to_have_count(0)
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator("#status")).to_have_text("connected")
    assert len(fake.frames("cf_agent_tool_approval")) == 1


def test_tool_rejection(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "delete it")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    _stream_tool_call(fake, rid, "delete_file", "c9", {"path": "/"},
                      [{"type": "tool-approval-request", "approvalId": "ap9", "toolCallId": "c9"}])
    card = page.locator(".part.tool[data-tool-call-id=c9]")
    card.locator("button.reject").click()
    assert fake.wait_for("cf_agent_tool_approval") == {
        "type": "cf_agent_tool_approval", "toolCallId": "c9", "approved": False, "autoContinue": True,
    }
    expect(card.locator(".tool-state")).to_have_text("rejected")
    fake.send({"type": "cf_agent_message_updated", "message": {"id": "a1", "role": "assistant", "parts": [
        {"type": "tool-delete_file", "toolCallId": "c9", "state": "output-denied", "input": {"path": "/"},
         "approval": {"id": "ap9", "approved": False}},
    ]}})
    expect(card).to_have_attribute("data-state", "output-denied")
    expect(card.locator(".tool-state")).to_have_text("denied")


def test_client_tool_runs_in_the_page(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "what browser is this?")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    _stream_tool_call(fake, rid, "getBrowserInfo", "b1", {})
    result = fake.wait_for("cf_agent_tool_result")
    output = result.pop("output")
    assert set(output) == {"userAgent", "language", "timeZone"}
    assert "Chrome" in output["userAgent"]
    assert result["toolCallId"] == "b1"
    assert result["toolName"] == "getBrowserInfo"
    assert result["autoContinue"] is True
    # It then asks to be attached to the continuation.
    wait_until(lambda: len(fake.frames("cf_agent_stream_resume_request")) >= 2, "continuation probe", timeout=10.0,
               interval=0.02, page=page)
    card = page.locator(".part.tool[data-tool=getBrowserInfo]")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(card.locator(".tool-io.output pre")).to_contain_text("userAgent")
    page.wait_for_timeout(300)
    assert len(fake.frames("cf_agent_tool_result")) == 1


def test_progress_parts_and_paused_output(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "work")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    bodies: list[Frame] = [
        {"type": "start", "messageId": "a1"}, {"type": "start-step"},
        {"type": "reasoning-start", "id": "r1"}, {"type": "reasoning-delta", "id": "r1", "delta": "Let me think."},
        {"type": "reasoning-end", "id": "r1"},
        {"type": "data-progress", "id": "p1", "data": {"message": "step 1 of 2"}},
        {"type": "data-status", "data": {"message": "crunching"}, "transient": True},
        {"type": "tool-input-available", "toolCallId": "s1", "toolName": "search", "input": {"q": "x"}},
        {"type": "tool-output-available", "toolCallId": "s1", "output": {"found": 1}, "preliminary": True},
    ]
    for seq, body in enumerate(bodies):
        fake.send(chunk(rid, body, seq))
    search = page.locator(".part.tool[data-tool=search]")
    expect(search.locator(".tool-state")).to_have_text("in progress…")
    expect(search.locator(".tool-io.progress pre")).to_contain_text('"found": 1')
    expect(page.locator(".part.data.transient")).to_contain_text("crunching")
    expect(page.locator(".part.data:not(.transient)")).to_contain_text("step 1 of 2")
    expect(page.locator(".part.reasoning summary")).to_have_text("Reasoning")

    more: list[Frame] = [
        {"type": "data-progress", "id": "p1", "data": {"message": "step 2 of 2"}},
        {"type": "tool-output-available", "toolCallId": "s1", "output": {"found": 2}},
        {"type": "tool-input-available", "toolCallId": "d1", "toolName": "refund", "input": {"amount": 5}},
        {"type": "tool-output-available", "toolCallId": "d1",
         "output": {"status": "paused", "executionId": "actpause_1", "message": "Awaiting a human."}},
        {"type": "source-url", "sourceId": "s", "url": "https://example.com/doc", "title": "The doc"},
        {"type": "source-url", "sourceId": "bad", "url": "javascript:alert(1)", "title": "bad link"},
        {"type": "text-start", "id": "t"}, {"type": "text-delta", "id": "t", "delta": "Done."},
        {"type": "text-end", "id": "t"}, {"type": "finish"},
    ]
    for seq, body in enumerate(more, start=len(bodies)):
        fake.send(chunk(rid, body, seq))
    fake.send(done(rid))
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator(".part.data")).to_have_count(1)  # same id replaced; transient gone
    expect(page.locator(".part.data")).to_contain_text("step 2 of 2")
    expect(search.locator(".tool-state")).to_have_text("done")
    expect(search.locator(".tool-io.output pre")).to_contain_text('"found": 2')
    refund = page.locator(".part.tool[data-tool=refund]")
    expect(refund.locator(".tool-state")).to_have_text("paused")
    expect(refund.locator(".tool-note.paused")).to_have_text("waiting for approval by staff")
    expect(page.locator(".part.source a")).to_have_attribute("href", "https://example.com/doc")
    expect(page.locator(".part.source a")).to_have_count(1)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("Done.")


def test_errors_and_server_clear(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "boom")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    # A thrown error before any chunk: one terminal frame with the text.
    fake.send({"body": "Model unavailable", "done": True, "id": rid, "type": RESP, "error": True})
    expect(page.locator("#error")).to_have_text("Model unavailable")
    expect(page.locator("#send")).to_be_enabled()
    # A rejected request (our cf_agent_error with the request id) releases the composer too.
    send_message(page, "again")
    rid2 = fake.wait_for("cf_agent_use_chat_request", 2)["id"]
    expect(page.locator("#send")).to_be_disabled()
    fake.send({"type": "cf_agent_error", "code": "invalid_message", "error": "Bad message", "id": rid2})
    expect(page.locator("#error")).to_have_text("Bad message")
    expect(page.locator("#send")).to_be_enabled()
    # Another tab cleared the chat.
    fake.send({"type": "cf_agent_chat_clear"})
    expect(page.locator(".msg")).to_have_count(0)


def test_terminal_close_code_shows_reason_and_stops_retrying(page: Page, live: Live, room: str) -> None:
    def refuse(server: FakeAgentServer, ws: WebSocketRoute) -> None:
        ws.send(json.dumps({"type": "cf_agent_error", "code": "PermissionDenied",
                            "error": "This conversation belongs to someone else."}))
        ws.close(code=4403, reason="forbidden")

    fake = FakeAgentServer(page, on_connect=refuse)
    open_chat(page, live, room, connected=False)
    expect(page.locator("#status")).to_have_text("disconnected: This conversation belongs to someone else.")
    expect(page.locator("#send")).to_be_disabled()
    page.wait_for_timeout(1500)
    assert len(fake.sockets) == 1


def test_reconnects_with_backoff_after_a_drop(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    for attempt in range(1, 4):
        fake.close(code=1011)
        fake.wait_for_sockets(attempt + 1)
        fake.wait_for("cf_agent_stream_resume_request", socket=attempt)
    expect(page.locator("#status")).to_have_text("connected")
    # Each socket probed for a stream to resume.
    assert len(fake.frames("cf_agent_stream_resume_request")) == 4


def test_drop_before_the_first_chunk_then_nothing_to_resume(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "lost?")
    fake.wait_for("cf_agent_use_chat_request")
    expect(page.locator("#send")).to_be_disabled()
    fake.close(code=1011)
    fake.wait_for_sockets(2)
    # The new socket's probe says idle: the page stops waiting and reloads the transcript.
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator("#send")).to_be_enabled()


def test_cut_off_stream_superseded_by_another(page: Page, live: Live, room: str) -> None:
    history = serve_history(page, [])
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "first")
    request = fake.wait_for("cf_agent_use_chat_request")
    rid = request["id"]
    first = json.loads(request["init"]["body"])["messages"][0]
    for frame in text_reply(rid, "a1", ["part"])[:4]:
        fake.send(frame)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("part")
    # Meanwhile r1 finished and another turn (from another tab) streams: it is resumed instead,
    # and the transcript is fetched again for r1's final reply.
    history += [first, assistant("a1", "part of the final reply"), user("u2", "other")]
    _resume_on(fake, "r-other")
    fake.close(code=1011)
    fake.wait_for_sockets(2)
    fake.wait_for("cf_agent_stream_resume_ack", socket=1)
    assert fake.frames("cf_agent_stream_resume_ack", socket=1) == [
        {"type": "cf_agent_stream_resume_ack", "id": "r-other"}
    ]
    for frame in text_reply("r-other", "a2", ["other ", "reply"]):
        fake.send({**frame, "replay": True}, 1)
    history.append(assistant("a2", "other reply"))  # persisted before the terminal frame
    fake.send({**done("r-other"), "replay": True}, 1)
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator(".msg.assistant").last).to_have_text(re.compile("other reply"))
    # The resumed reply shows before the transcript fetched again replaces r1's partial one.
    wait_until(lambda: assistant_texts(page) == ["part of the final reply", "other reply"],
               "r1's final reply from the transcript fetched again", timeout=10.0, interval=0.02, page=page)
    assert user_texts(page) == ["first", "other"]


def test_stopped_stream_is_still_acked_on_resume_but_not_shown(page: Page, live: Live, room: str) -> None:
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "long one")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    frames = text_reply(rid, "a1", ["one ", "two ", "three"])
    for frame in frames[:4]:
        fake.send(frame)
    expect(page.locator(".msg.assistant .part.text")).to_have_text("one ")
    page.click("#stop")
    assert fake.wait_for("cf_agent_chat_request_cancel") == {"type": "cf_agent_chat_request_cancel", "id": rid}
    expect(page.locator("#send")).to_be_enabled()
    # The server had not stopped yet when the socket dropped: the new socket is offered the stream.
    _resume_on(fake, rid)
    fake.close(code=1011)
    fake.wait_for_sockets(2)
    fake.wait_for("cf_agent_stream_resume_ack", socket=1)
    for frame in frames:
        fake.send({**frame, "replay": True}, 1)
    fake.send({**done(rid, outcome="aborted"), "replay": True}, 1)
    page.wait_for_timeout(300)
    assert assistant_texts(page) == ["one "]
    expect(page.locator("#status")).to_have_text("connected")
    expect(page.locator("#send")).to_be_enabled()


def test_frames_after_a_streams_terminal_frame_are_ignored(page: Page, live: Live, room: str) -> None:
    """A continuation replayed and closed (done + replay), then its live frames and done again.

    The live server has sent exactly this to the page that approved a call, when the continuation
    finished before the page's ACK: the page shows the follow-up once and is idle afterwards.
    """
    fake = FakeAgentServer(page)
    open_chat(page, live, room)
    send_message(page, "mail it")
    rid = fake.wait_for("cf_agent_use_chat_request")["id"]
    _stream_tool_call(fake, rid, "send_email", "c1", {"to": "bob"},
                      [{"type": "tool-approval-request", "approvalId": "c1", "toolCallId": "c1"}])
    card = page.locator(".part.tool[data-tool-call-id=c1]")
    expect(card).to_have_attribute("data-state", "approval-requested")
    bodies: list[Frame] = [
        {"type": "start"},
        {"type": "tool-output-available", "toolCallId": "c1", "output": "sent"},
        {"type": "start-step"}, {"type": "text-start", "id": "t2"},
        {"type": "text-delta", "id": "t2", "delta": "send_email "}, {"type": "text-delta", "id": "t2", "delta": "ok."},
        {"type": "text-end", "id": "t2"}, {"type": "finish-step"}, {"type": "finish"},
    ]

    def on_frame(index: int, frame: Frame) -> None:
        if frame.get("type") == "cf_agent_stream_resume_request":
            fake.send({"type": "cf_agent_stream_pending", "id": "k1", "probeId": frame["probeId"]})
            fake.send({"type": "cf_agent_stream_resuming", "id": "k1"})
        elif frame.get("type") == "cf_agent_stream_resume_ack":
            for seq, body in enumerate(bodies):
                fake.send(chunk("k1", body, seq, continuation=True, replay=True))
            fake.send(done("k1", continuation=True, replay=True))
            for seq, body in enumerate(bodies[1:], start=1):
                fake.send(chunk("k1", body, seq, continuation=True))
            fake.send(done("k1", continuation=True, messageIds=["u1"]))

    fake.on_frame = on_frame
    card.locator("button.approve").click()
    fake.wait_for("cf_agent_stream_resume_ack")
    expect(card).to_have_attribute("data-state", "output-available")
    expect(page.locator("#status")).to_have_text("connected")
    page.wait_for_timeout(300)
    assert assistant_texts(page) == ["send_email ok."]
    expect(page.locator(".msg.assistant")).to_have_count(1)
    expect(page.locator(".msg.assistant .part.text")).to_have_count(1)
    expect(page.locator("#send")).to_be_enabled()
