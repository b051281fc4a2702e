"""Every turn feature through every provider protocol, against local servers speaking it for real.

``AGENT_MODEL`` points the demo agent at one of ``tests/support/provider_protocols.PROTOCOLS``:
OpenAI Chat Completions, an OpenAI-compatible server, OpenAI's Responses API and Anthropic
Messages. Turns go over the WebSocket as a browser sends them, through ``llm.get_model`` →
pydantic-ai's model for the provider → the vendor's SDK → HTTP/SSE → the frame encoder → the turn
engine → the transcript. Nothing is mocked; each test asserts what the client received, what was
stored, and what the provider server was sent. The README's provider matrix names these tests.
"""

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import override_settings

from agents_app.demo.models import Refund
from agents_app.models import Turn, TurnUsage
from tests.support.fake_provider import (
    CutReply,
    ErrorReply,
    ScriptedServer,
    StreamErrorReply,
    TextReply,
    ToolCall,
    ToolCallsReply,
)
from tests.support.fake_responses_server import FakeResponsesServer
from tests.support.frames import (
    RESP,
    chat_request,
    chunks,
    follow_continuation,
    is_done,
    message_text,
    open_agent,
    receive_until,
    text_of,
    user_message,
)
from tests.support.provider_protocols import (
    API_KEY,
    PROTOCOLS,
    REASONING_PROTOCOLS,
    SIGNED_REASONING_PROTOCOLS,
    Protocol,
    running,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)

AGENT = "/agents/demo-agent"
# Retry-After of 1 ms: the SDKs' retries of a 5xx/529 stay fast.
FAST_RETRY = {"retry-after-ms": "1"}


@dataclass(frozen=True)
class Live:
    """A protocol with its server running and ``AGENT_MODEL`` pointing at it."""

    protocol: Protocol
    server: ScriptedServer


@pytest.fixture(params=list(PROTOCOLS))
def live(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    with running(request.param, monkeypatch) as (protocol, server):
        yield Live(protocol, server)


async def history(user: Any, name: str) -> list[dict[str, Any]]:
    from django.test import AsyncClient

    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(f"{AGENT}/{name}/get-messages")
    assert response.status_code == 200
    return response.json()


async def turn(a: WebsocketCommunicator, request_id: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One chat request; its response frames up to and including its done frame."""
    await a.send_json_to(chat_request(request_id, messages))
    frames = await receive_until(a, is_done(request_id), timeout=20)
    return [f for f in frames if f.get("type") == RESP and f.get("id") == request_id]


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    """The chunk types, but for the ``message-metadata`` recording a Responses API response's id
    (asserted by ``test_streamed_text``)."""
    return [c["type"] for c in chunks(frames) if c["type"] != "message-metadata"]


def tool_part(message: dict[str, Any], call_id: str) -> dict[str, Any]:
    return next(p for p in message["parts"] if p.get("toolCallId") == call_id)


def the_error(frames: list[dict[str, Any]]) -> str:
    """The in-band model error: one ``error`` frame right before a done frame ``outcome: error``."""
    [error] = [f for f in frames if f.get("error")]
    assert frames.index(error) == len(frames) - 2
    assert frames[-1]["done"] is True
    assert frames[-1]["outcome"] == "error"
    return error["body"]


# --- streamed text ----------------------------------------------------------------------------------
async def test_streamed_text(live: Live, ws: Any, user: Any) -> None:
    pieces = ["Hello", " from", " the", " provider", ", ünïcode ✓."]
    live.server.script(TextReply(pieces))
    a = await open_agent(ws, f"{AGENT}/text")

    frames = await turn(a, "r1", [user_message("u1", "hi there")])

    assert kinds(frames) == [
        "start", "start-step", "text-start", *["text-delta"] * len(pieces), "text-end", "finish-step", "finish",
    ]
    assert [c["delta"] for c in chunks(frames) if c["type"] == "text-delta"] == pieces
    assert chunks(frames)[-1]["messageMetadata"] == {"finishReason": "stop"}
    [request] = live.server.requests
    assert request.stream is True
    recorded = [c["messageMetadata"] for c in chunks(frames) if c["type"] == "message-metadata"]
    if live.protocol.key == "openai-responses":
        # The response id, as the stream starts: a recovery fetches the response instead of generating.
        assert recorded == [{"providerResponseId": "resp_fake1"}]
        assert request.body["background"] is True
    else:
        assert recorded == []
    assert request.body["model"] == live.protocol.model_name
    assert live.protocol.auth(request) == API_KEY
    assert [m["role"] for m in await history(user, "text")] == ["user", "assistant"]
    stored = (await history(user, "text"))[-1]
    assert next(p for p in stored["parts"] if p["type"] == "text")["text"] == "".join(pieces)
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.COMPLETED


# --- tools ------------------------------------------------------------------------------------------
async def test_one_tool_call(live: Live, ws: Any, user: Any) -> None:
    call = ToolCall("get_weather", '{"city": "Paris"}', id="call_paris", chunk_size=5)
    live.server.script(ToolCallsReply([call]), TextReply(["Paris is ", "sunny."]))
    a = await open_agent(ws, f"{AGENT}/tool")

    frames = await turn(a, "r1", [user_message("u1", "Weather in Paris?")])

    body = chunks(frames)
    assert [c["inputTextDelta"] for c in body if c["type"] == "tool-input-delta"] == call.argument_pieces()
    [available] = [c for c in body if c["type"] == "tool-input-available"]
    assert (available["toolName"], available["input"]) == ("get_weather", {"city": "Paris"})
    assert {c["toolCallId"]: c["output"] for c in body if c["type"] == "tool-output-available"} == {
        "call_paris": "Paris: sunny, 21°C"}
    assert text_of(frames) == "Paris is sunny."
    first, second = live.server.requests
    assert live.protocol.tool_results(first) == {}
    assert live.protocol.tool_results(second) == {"call_paris": "Paris: sunny, 21°C"}
    stored = (await history(user, "tool"))[-1]
    assert tool_part(stored, "call_paris")["state"] == "output-available"


async def test_two_tool_calls_in_one_response(live: Live, ws: Any) -> None:
    live.server.script(
        ToolCallsReply([ToolCall("get_weather", '{"city": "Oslo"}', id="call_oslo"),
                        ToolCall("get_weather", '{"city": "Lisbon"}', id="call_lisbon")]),
        TextReply(["Cold in Oslo, mild in Lisbon."]),
    )
    a = await open_agent(ws, f"{AGENT}/two")

    frames = await turn(a, "r1", [user_message("u1", "Oslo and Lisbon?")])

    outputs = {c["toolCallId"]: c["output"] for c in chunks(frames) if c["type"] == "tool-output-available"}
    assert outputs == {"call_oslo": "Oslo: snow, -3°C", "call_lisbon": "Lisbon: clear, 18°C"}
    assert live.protocol.tool_results(live.server.requests[1]) == outputs
    assert text_of(frames) == "Cold in Oslo, mild in Lisbon."


async def test_tool_that_needs_approval(live: Live, ws: Any, user: Any) -> None:
    call = ToolCall("send_email", '{"to": "bob@example.com", "subject": "hi"}', id="call_mail")
    live.server.script(ToolCallsReply([call]), TextReply(["Sent."]))
    a = await open_agent(ws, f"{AGENT}/approve")

    first = await turn(a, "r1", [user_message("u1", "Mail Bob")])
    assert {"type": "tool-approval-request", "approvalId": "call_mail", "toolCallId": "call_mail"} in chunks(first)
    assert len(live.server.requests) == 1, "nothing runs, and the model waits, until the user decides"
    assert tool_part((await history(user, "approve"))[-1], "call_mail")["state"] == "approval-requested"

    await a.send_json_to({"type": "cf_agent_tool_approval", "toolCallId": "call_mail", "approved": True,
                          "autoContinue": True})
    frames = await follow_continuation(a)

    assert text_of(frames) == "Sent."
    sent = "Email to bob@example.com about 'hi' sent (demo)."
    assert live.protocol.tool_results(live.server.requests[1]) == {"call_mail": sent}
    part = tool_part((await history(user, "approve"))[-1], "call_mail")
    assert (part["state"], part["output"]) == ("output-available", sent)


async def test_client_tool(live: Live, ws: Any, user: Any) -> None:
    live.server.script(ToolCallsReply([ToolCall("getBrowserInfo", "{}", id="call_browser")]), TextReply(["French."]))
    a = await open_agent(ws, f"{AGENT}/client")

    first = await turn(a, "r1", [user_message("u1", "Which language?")])
    assert kinds(first)[-3:] == ["tool-input-available", "finish-step", "finish"]
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "call_browser", "toolName": "getBrowserInfo",
                          "output": {"language": "fr"}, "autoContinue": True})
    frames = await follow_continuation(a)

    assert text_of(frames) == "French."
    [result] = live.protocol.tool_results(live.server.requests[1]).values()
    assert json.loads(result) == {"language": "fr"}
    part = tool_part((await history(user, "client"))[-1], "call_browser")
    assert (part["state"], part["output"]) == ("output-available", {"language": "fr"})


async def test_action_through_the_ledger(live: Live, ws: Any, user: Any) -> None:
    call = ToolCall("refund_order", '{"order_id": "A-17", "amount": 20, "reason": "late"}', id="call_refund")
    live.server.script(ToolCallsReply([call]), TextReply(["Refunded."]))
    a = await open_agent(ws, f"{AGENT}/action")

    frames = await turn(a, "r1", [user_message("u1", "Refund A-17")])

    [output] = [c["output"] for c in chunks(frames) if c["type"] == "tool-output-available"]
    refund = await Refund.objects.aget(order_id="A-17")
    assert (refund.tool_call_id, refund.request_id) == ("call_refund", "r1")
    assert output["refund_id"] == refund.pk
    assert json.loads(live.protocol.tool_results(live.server.requests[1])["call_refund"])["refund_id"] == refund.pk
    assert text_of(frames) == "Refunded."


# --- cancellation -----------------------------------------------------------------------------------
async def test_cancel_mid_stream_closes_the_provider_stream(live: Live, ws: Any, user: Any) -> None:
    live.server.chunk_delay = 0.02
    live.server.script(TextReply([f"w{i} " for i in range(300)]))
    a = await open_agent(ws, f"{AGENT}/cancel")
    await a.send_json_to(chat_request("r1", [user_message("u1", "Talk a lot")]))
    deltas = 0

    def third_delta(frame: dict[str, Any]) -> bool:
        nonlocal deltas
        deltas += frame.get("type") == RESP and '"text-delta"' in frame.get("body", "")
        return deltas == 3

    await receive_until(a, third_delta, timeout=20)

    await a.send_json_to({"type": "cf_agent_chat_request_cancel", "id": "r1"})
    frames = await receive_until(a, is_done("r1"), timeout=20)

    assert frames[-1]["outcome"] == "aborted"
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.ABORTED
    # The provider's stream was closed: the server saw its client go away before the reply's end;
    # a Responses API reply, running in the background, was cancelled on the server.
    server = live.server

    async def stopped() -> bool:
        if isinstance(server, FakeResponsesServer):
            return server.cancelled == ["resp_fake1"]
        return server.disconnects == 1

    await eventually(stopped, "the provider stream to stop", timeout=10)
    if isinstance(server, FakeResponsesServer):
        assert server.stored("resp_fake1")["status"] == "cancelled"
    assert server.generated < 300
    stored = (await history(user, "cancel"))[-1]
    partial = message_text(stored)
    assert partial.startswith("w0 w1 w2 ")
    assert len(partial.split()) < 300


# --- provider errors --------------------------------------------------------------------------------
async def test_401_is_reported_and_not_retried(live: Live, ws: Any) -> None:
    error_type = "authentication_error" if live.protocol.key == "anthropic" else "invalid_request_error"
    live.server.script(ErrorReply(401, "Incorrect API key provided.", type=error_type, code="invalid_api_key"),
                       TextReply(["Back again."]))
    a = await open_agent(ws, f"{AGENT}/e401")

    frames = await turn(a, "r1", [user_message("u1", "hello")])

    error = the_error(frames)
    assert "401" in error
    assert "Incorrect API key provided." in error
    assert len(live.server.requests) == 1
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.ERROR
    frames = await turn(a, "r2", [user_message("u1", "hello"), user_message("u2", "again")])
    assert text_of(frames) == "Back again."


async def test_429_with_retry_after_is_retried(live: Live, ws: Any) -> None:
    error_type = "rate_limit_error" if live.protocol.key == "anthropic" else "requests"
    live.server.script(ErrorReply(429, "Rate limit reached.", type=error_type, headers={"retry-after": "1"}),
                       TextReply(["Fine."]))
    a = await open_agent(ws, f"{AGENT}/e429")

    frames = await turn(a, "r1", [user_message("u1", "hello")])

    assert not [f for f in frames if f.get("error")]
    assert text_of(frames) == "Fine."
    assert len(live.server.requests) == 2
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.COMPLETED


async def test_500_is_retried_then_reported(live: Live, ws: Any) -> None:
    failure = ErrorReply(500, "The server had an error.", headers=FAST_RETRY)
    live.server.script(failure, failure, failure)
    a = await open_agent(ws, f"{AGENT}/e500")

    frames = await turn(a, "r1", [user_message("u1", "hello")])

    error = the_error(frames)
    assert "500" in error
    assert "The server had an error." in error
    assert len(live.server.requests) == 3, "the SDK's two retries, then the turn fails"


async def test_anthropic_529_overloaded_is_retried(ws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Anthropic's HTTP form of ``overloaded_error``; its SDK retries it as a 5xx.
    with running("anthropic", monkeypatch) as (_, server):
        server.script(ErrorReply(529, "Overloaded", type="overloaded_error", headers=FAST_RETRY), TextReply(["Fine."]))
        a = await open_agent(ws, f"{AGENT}/e529")

        frames = await turn(a, "r1", [user_message("u1", "hello")])

        assert text_of(frames) == "Fine."
        assert len(server.requests) == 2
        assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.COMPLETED


async def test_error_event_in_the_middle_of_the_stream(live: Live, ws: Any, user: Any) -> None:
    # Anthropic's way is an ``event: error`` (here ``overloaded_error``); Responses' a ``response.failed``.
    kind = "overloaded_error" if live.protocol.key == "anthropic" else "server_error"
    live.server.script(StreamErrorReply(["Partial ", "answer "], "Overloaded mid-stream.", type=kind))
    a = await open_agent(ws, f"{AGENT}/inband")

    frames = await turn(a, "r1", [user_message("u1", "hello")])

    assert kinds(frames) == ["start", "start-step", "text-start", "text-delta", "text-delta", "text-end"]
    assert "Overloaded mid-stream." in the_error(frames)
    stored = (await history(user, "inband"))[-1]
    assert [p["text"] for p in stored["parts"] if p["type"] == "text"] == ["Partial answer "]
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.ERROR


async def test_stream_that_breaks_in_the_middle(live: Live, ws: Any, user: Any) -> None:
    live.server.script(CutReply(["Partial ", "answer "]), TextReply(["Whole answer."]))
    a = await open_agent(ws, f"{AGENT}/cut")

    frames = await turn(a, "r1", [user_message("u1", "hello")])

    assert kinds(frames)[:5] == ["start", "start-step", "text-start", "text-delta", "text-delta"]
    assert the_error(frames)
    stored = (await history(user, "cut"))[-1]
    assert [p["text"] for p in stored["parts"] if p["type"] == "text"] == ["Partial answer "]
    assert (await Turn.objects.aget(request_id="r1")).status == Turn.Status.ERROR
    frames = await turn(a, "r2", [*await history(user, "cut"), user_message("u2", "again")])
    assert text_of(frames) == "Whole answer."


# --- usage ------------------------------------------------------------------------------------------
async def test_usage_is_stored_with_the_turn(live: Live, ws: Any, user: Any) -> None:
    # Token counts of the server's own choosing, not the defaults: what is stored is what it reported.
    live.server.input_tokens, live.server.output_tokens = 23, 5
    call = ToolCall("get_weather", '{"city": "Paris"}', id="call_paris")
    live.server.script(TextReply(["Hello."]), ToolCallsReply([call]), TextReply(["Sunny."]))
    a = await open_agent(ws, f"{AGENT}/usage")

    await turn(a, "r1", [user_message("u1", "hi")])
    await turn(a, "r2", [*await history(user, "usage"), user_message("u2", "Weather in Paris?")])

    assert len(live.server.requests) == 3
    stored = {
        u.turn.request_id: (u.model, u.requests, u.input_tokens, u.output_tokens)
        async for u in TurnUsage.objects.select_related("turn")
    }
    assert stored == {
        "r1": (live.protocol.model_name, 1, 23, 5),
        "r2": (live.protocol.model_name, 2, 2 * 23, 2 * 5),  # a tool turn: two model requests
    }


# --- reasoning --------------------------------------------------------------------------------------
@pytest.fixture(params=REASONING_PROTOCOLS)
def thinking(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    """``live`` for the protocols whose reasoning the next request must carry back."""
    with running(request.param, monkeypatch) as (protocol, server):
        yield Live(protocol, server)


async def test_reasoning_streams_is_stored_and_goes_back_signed(thinking: Live, ws: Any, user: Any) -> None:
    reasoning = ["The user ", "greets me; ", "greet back."]
    thinking.server.script(TextReply(["Hello!"], reasoning=reasoning), TextReply(["Bye."]))
    a = await open_agent(ws, f"{AGENT}/reasoning")

    frames = await turn(a, "r1", [user_message("u1", "hi")])

    assert kinds(frames) == [
        "start", "start-step", "reasoning-start", *["reasoning-delta"] * len(reasoning), "reasoning-end",
        "text-start", "text-delta", "text-end", "finish-step", "finish",
    ]
    body = chunks(frames)
    assert [c["delta"] for c in body if c["type"] == "reasoning-delta"] == reasoning
    stored = (await history(user, "reasoning"))[-1]
    [part] = [p for p in stored["parts"] if p["type"] == "reasoning"]
    assert part["text"] == "".join(reasoning)
    assert part["state"] == "done"

    frames = await turn(a, "r2", [*await history(user, "reasoning"), user_message("u2", "bye")])

    assert text_of(frames) == "Bye."
    [replayed] = thinking.protocol.replayed_reasoning(thinking.server.requests[1])
    assert replayed == thinking.protocol.signed_reasoning("".join(reasoning))


async def test_reasoning_before_a_tool_call_goes_back_within_the_turn(thinking: Live, ws: Any) -> None:
    reasoning = ["Need the ", "weather."]
    thinking.server.script(
        ToolCallsReply([ToolCall("get_weather", '{"city": "Paris"}', id="call_paris")], reasoning=reasoning),
        TextReply(["Sunny."]),
    )
    a = await open_agent(ws, f"{AGENT}/reasoning-tool")

    frames = await turn(a, "r1", [user_message("u1", "Weather in Paris?")])

    assert kinds(frames).index("reasoning-end") < kinds(frames).index("tool-input-start")
    assert text_of(frames) == "Sunny."
    [replayed] = thinking.protocol.replayed_reasoning(thinking.server.requests[1])
    assert replayed == thinking.protocol.signed_reasoning("".join(reasoning))


@pytest.fixture(params=SIGNED_REASONING_PROTOCOLS)
def signed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Live]:
    """``live`` for the protocols whose reasoning is signed."""
    with running(request.param, monkeypatch) as (protocol, server):
        yield Live(protocol, server)


async def test_reasoning_without_text_is_kept_when_signed(signed: Live, ws: Any, user: Any) -> None:
    thinking = signed
    # A reasoning block with no text to show (thinking not displayed, a summary not asked for) still
    # carries the signature or encrypted content the next request must send back: the sanitizer keeps it.
    thinking.server.script(TextReply(["Hello!"], reasoning=[""]), TextReply(["Bye."]))
    a = await open_agent(ws, f"{AGENT}/reasoning-empty")

    await turn(a, "r1", [user_message("u1", "hi")])

    stored = await history(user, "reasoning-empty")
    [part] = [p for p in stored[-1]["parts"] if p["type"] == "reasoning"]
    assert part["text"] == ""
    assert part["providerMetadata"]["pydantic_ai"]["signature"] == thinking.protocol.signed_reasoning("")[
        "signature" if thinking.protocol.key == "anthropic" else "encrypted_content"]
    await turn(a, "r2", [*stored, user_message("u2", "bye")])
    [replayed] = thinking.protocol.replayed_reasoning(thinking.server.requests[1])
    assert replayed == thinking.protocol.signed_reasoning("")


# --- files from the client --------------------------------------------------------------------------
# A 1x1 PNG and a one-page PDF: small real files, as ``sendMessage({text, files})`` sends them.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
PDF = (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj 2 0 obj<</Type/Pages/Count 0/Kids[]>>endobj\n"
       b"trailer<</Root 1 0 R>>\n%%EOF\n")


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def file_message(message_id: str, text: str, *files: tuple[str, str, str]) -> dict[str, Any]:
    """A user message as useAgentChat's ``sendMessage({text, files})`` makes it: the file parts, then the text."""
    parts = [{"type": "file", "mediaType": media_type, "filename": name, "url": url} for media_type, name, url in files]
    return {"id": message_id, "role": "user", "parts": [*parts, {"type": "text", "text": text}]}


async def test_inline_image_and_pdf_reach_the_model(live: Live, ws: Any, user: Any) -> None:
    live.server.script(TextReply(["A pixel and an empty PDF."]))
    a = await open_agent(ws, f"{AGENT}/files")
    message = file_message("u1", "What are these?", ("image/png", "pixel.png", data_url("image/png", PNG)),
                           ("application/pdf", "doc.pdf", data_url("application/pdf", PDF)))

    frames = await turn(a, "r1", [message])

    assert text_of(frames) == "A pixel and an empty PDF."
    [content] = live.protocol.user_contents(live.server.requests[0])
    assert live.protocol.files_sent(content) == [
        ("image", "image/png", base64.b64encode(PNG).decode()),
        ("document", "application/pdf", base64.b64encode(PDF).decode()),
        ("text", None, "What are these?"),
    ]
    # Stored as sent: the next turn's history carries the files again.
    assert (await history(user, "files"))[0] == message


async def test_image_by_url_reaches_the_model(live: Live, ws: Any) -> None:
    live.server.files["/files/pixel.png"] = ("image/png", PNG)
    url = f"{live.server.url}/files/pixel.png"
    live.server.script(TextReply(["A pixel."]))
    a = await open_agent(ws, f"{AGENT}/file-url")

    frames = await turn(a, "r1", [file_message("u1", "And this?", ("image/png", "pixel.png", url))])

    assert text_of(frames) == "A pixel."
    [content] = live.protocol.user_contents(live.server.requests[0])
    [image, _] = live.protocol.files_sent(content)
    # Every provider here takes an image by URL: it is passed on, not downloaded by our server.
    assert image == ("image", None, url)
    assert live.server.downloads == []


async def test_inline_file_above_the_limit_gets_an_error_frame_and_stores_nothing(live: Live, ws: Any,
                                                                                 user: Any) -> None:
    live.server.script(TextReply(["Small enough."]))
    a = await open_agent(ws, f"{AGENT}/too-big")
    big = data_url("image/png", PNG + bytes(2048))

    with override_settings(AGENT_MAX_FILE_BYTES=1024):
        await a.send_json_to(chat_request("r1", [file_message("u1", "Look", ("image/png", "big.png", big))]))
        error = await a.receive_json_from(timeout=10)
        assert error["type"] == "cf_agent_error"
        assert error["code"] == "invalid_message"
        assert error["error"] == (f"File 'big.png' in message 'u1', part 0, is {len(PNG) + 2048:,} bytes; a file sent "
                                  "inline may have at most 1,024 (AGENT_MAX_FILE_BYTES): send it by URL instead")
        assert live.server.requests == []
        assert await history(user, "too-big") == []

        # The same conversation goes on with a file that fits.
        fits = ("image/png", "pixel.png", data_url("image/png", PNG))
        frames = await turn(a, "r2", [file_message("u2", "Look", fits)])
    assert text_of(frames) == "Small enough."


async def test_pdf_by_url(live: Live, ws: Any, user: Any) -> None:
    """Responses and Anthropic take a document by URL. Chat Completions does not: pydantic-ai would
    download it, and refuses a private address (SSRF), so the message is refused before it is
    stored, with an error frame, and the conversation goes on (stored, it would fail every turn)."""
    live.server.files["/files/doc.pdf"] = ("application/pdf", PDF)
    url = f"{live.server.url}/files/doc.pdf"
    live.server.script(TextReply(["An empty PDF."]))
    a = await open_agent(ws, f"{AGENT}/pdf-url")
    message = file_message("u1", "Summarise", ("application/pdf", "doc.pdf", url))

    if live.protocol.key in ("openai-chat", "openai-compatible"):
        await a.send_json_to(chat_request("r1", [message]))
        error = await a.receive_json_from(timeout=10)
        assert (error["type"], error["code"]) == ("cf_agent_error", "invalid_message")
        assert error["error"] == (
            "File 'doc.pdf' in message 'u1', part 0 cannot be read by URL: Access to private/internal IP "
            "address (127.0.0.1) is blocked. This model's API takes no such file by URL and this server "
            "downloads no private address: send the file inline instead"
        )
        assert live.server.requests == []
        assert live.server.downloads == []
        assert await history(user, "pdf-url") == []

        inline = file_message("u2", "Summarise", ("application/pdf", "doc.pdf", data_url("application/pdf", PDF)))
        frames = await turn(a, "r2", [inline])
        assert text_of(frames) == "An empty PDF."
        [content] = live.protocol.user_contents(live.server.requests[0])
        assert live.protocol.files_sent(content)[0] == ("document", "application/pdf", base64.b64encode(PDF).decode())
        return
    frames = await turn(a, "r1", [message])

    assert text_of(frames) == "An empty PDF."
    [content] = live.protocol.user_contents(live.server.requests[0])
    assert live.protocol.files_sent(content)[0] == ("document", None, url)
    assert live.server.downloads == []
