"""Real provider code against a real (local) OpenAI-compatible HTTP server.

``AGENT_MODEL`` points the demo agent at ``tests/support/fake_openai_server.py``, which speaks
OpenAI's Chat Completions wire format (SSE streaming included). Turns are driven over the
WebSocket exactly as a browser would, so these tests cover ``llm.get_model`` → pydantic-ai's
``OpenAIChatModel`` → the ``openai`` SDK → HTTP → the frame encoder → the turn engine → the
transcript. Nothing is mocked.
"""

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, override_settings
from pydantic_ai import Agent, models
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel

from agents_app import transcript
from agents_app.demo.agents import DemoAgent
from agents_app.errors import AgentConfigurationError
from agents_app.llm import get_model, is_demo
from agents_app.llm.providers import OLLAMA_DEFAULT_URL
from agents_app.models import AgentInstance, Turn
from tests.support.fake_openai_server import (
    COMPLETIONS_PATH,
    ErrorReply,
    FakeOpenAIServer,
    StreamErrorReply,
    TextReply,
    ToolCall,
    ToolCallsReply,
)
from tests.support.frames import RESP, chat_request, chunks, is_done, receive_until, text_of, user_message

API_KEY = "test-key"
AGENT_PATH = "/agents/demo-agent/default"
# Retry-After of 1 ms: the openai SDK's retries of a 5xx stay fast.
FAST_RETRY = {"retry-after-ms": "1"}


# --- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture
def allow_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py forbids real model requests; these tests talk to a local server only."""
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", True)


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


@dataclass(frozen=True)
class Provider:
    """One way of pointing ``AGENT_MODEL`` at the fake server."""

    spec: str
    model_name: str
    server: FakeOpenAIServer


@pytest.fixture(params=["openai-chat:gpt-4o-mini", "openai-compatible:qwen2.5-7b-instruct"])
def provider(request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer,
             allow_model_requests: None) -> Iterator[Provider]:
    spec: str = request.param
    with override_settings(AGENT_MODEL=spec, AGENT_MODEL_BASE_URL=fake_openai.base_url,
                           AGENT_MODEL_API_KEY=API_KEY):
        yield Provider(spec=spec, model_name=spec.partition(":")[2], server=fake_openai)


@pytest.fixture
async def chat(ws: Callable[..., Any]) -> WebsocketCommunicator:
    """A connection to the demo agent, past its two greeting frames (identity, MCP servers)."""
    communicator = await ws(AGENT_PATH)
    assert (await communicator.receive_json_from())["type"] == "cf_agent_identity"
    assert (await communicator.receive_json_from())["type"] == "cf_agent_mcp_servers"
    return communicator


# --- helpers ----------------------------------------------------------------------------------------
async def run_turn(communicator: WebsocketCommunicator, request_id: str,
                   messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send a chat request; the response frames of it, up to and including its terminal frame."""
    await communicator.send_json_to(chat_request(request_id, messages))
    received = await receive_until(communicator, is_done(request_id), timeout=15)
    return [f for f in received if f.get("type") == RESP and f.get("id") == request_id]


def chunk_types(frames: list[dict[str, Any]]) -> list[str]:
    return [c["type"] for c in chunks(frames)]


async def stored_transcript() -> list[dict[str, Any]]:
    instance = await AgentInstance.objects.aget(slug="demo-agent", name="default")
    return await database_sync_to_async(transcript.load)(instance)


async def turn_of(request_id: str) -> Turn:
    return await Turn.objects.aget(request_id=request_id)


async def get_messages(user: Any) -> list[dict[str, Any]]:
    """``GET /agents/demo-agent/default/get-messages`` as ``user`` (what useAgentChat fetches)."""
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(f"{AGENT_PATH}/get-messages")
    assert response.status_code == 200
    return response.json()


def assert_error_then_done(frames: list[dict[str, Any]], request_id: str, *needles: str) -> str:
    """The protocol's in-band model error: one ``error:true`` frame, then a done frame ``outcome:error``.

    Returns the error text; every one of ``needles`` must appear in it.
    """
    errors = [f for f in frames if f.get("error")]
    assert len(errors) == 1, frames
    error = errors[0]
    assert error["done"] is False
    assert error["id"] == request_id
    for needle in needles:
        assert needle in error["body"], error["body"]
    terminal = frames[-1]
    assert terminal["done"] is True
    assert terminal.get("outcome") == "error"
    assert "error" not in terminal  # not a thrown-error frame: the error was sent in-band
    assert frames.index(error) == len(frames) - 2, "the error frame comes right before the done frame"
    return error["body"]


def system_prompt_of(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    assert first["role"] == "system"
    return first["content"]


pytestmark = pytest.mark.django_db(transaction=True)


# --- (a) streamed text ------------------------------------------------------------------------------
async def test_streamed_text_reply_is_framed_and_persisted(
    provider: Provider, chat: WebsocketCommunicator, user: Any
) -> None:
    pieces = ["Hello", " from", " the fake", " provider", ", ünïcode ✓."]
    provider.server.script(TextReply(pieces))

    frames = await run_turn(chat, "r1", [user_message("u1", "hi there")])

    assert chunk_types(frames) == [
        "start", "start-step", "text-start", *["text-delta"] * len(pieces), "text-end", "finish-step", "finish",
    ]
    body = chunks(frames)
    # One text-delta per streamed content delta, in order: nothing buffered or merged.
    assert [c["delta"] for c in body if c["type"] == "text-delta"] == pieces
    text_id = body[2]["id"]
    assert {c["id"] for c in body if c["type"].startswith("text-")} == {text_id}
    assert body[-1] == {"type": "finish", "messageMetadata": {"finishReason": "stop"}}
    assert [f["seq"] for f in frames[:-1]] == list(range(len(frames) - 1))
    assert frames[-1] == {"body": "", "done": True, "id": "r1", "type": RESP, "messageIds": ["u1"]}

    # What the model was sent: one streamed request with the system prompt and the user's text.
    [request] = provider.server.requests
    assert request.path == COMPLETIONS_PATH
    assert request.body["model"] == provider.model_name
    assert request.body["stream"] is True
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.messages == [
        {"role": "system", "content": DemoAgent.system_prompt},
        {"role": "user", "content": "hi there"},
    ]
    assert sorted(t["function"]["name"] for t in request.body["tools"]) == [
        "crunch_numbers", "deploy_release", "getBrowserInfo", "get_weather", "refund_order", "research", "send_email"]
    # An action's schema is its input model's: what the provider is shown.
    [refund] = [t["function"] for t in request.body["tools"] if t["function"]["name"] == "refund_order"]
    assert set(refund["parameters"]["properties"]) == {"order_id", "amount", "reason"}
    assert refund["parameters"]["required"] == ["order_id", "amount"]

    # Persisted: get-messages returns the user message and the assistant's full text.
    message_id = body[0]["messageId"]
    stored = await get_messages(user)
    assert stored[0] == user_message("u1", "hi there")
    assert stored[1] == {
        "id": message_id, "role": "assistant",
        "parts": [{"type": "step-start"}, {"type": "text", "text": "".join(pieces), "state": "done"}],
    }
    assert len(stored) == 2
    assert (await turn_of("r1")).status == Turn.Status.COMPLETED


async def test_history_is_sent_back_on_the_next_turn(provider: Provider, chat: WebsocketCommunicator) -> None:
    provider.server.script(TextReply(["First ", "answer."]), TextReply(["Second ", "answer."]))
    await run_turn(chat, "r1", [user_message("u1", "one")])
    history = await stored_transcript()

    frames = await run_turn(chat, "r2", [*history, user_message("u2", "two")])

    assert text_of(frames) == "Second answer."
    assert provider.server.requests[1].messages == [
        {"role": "system", "content": DemoAgent.system_prompt},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "two"},
    ]
    assert [m["role"] for m in await stored_transcript()] == ["user", "assistant", "user", "assistant"]


# --- (b) server tool call ---------------------------------------------------------------------------
async def test_streamed_tool_call_runs_the_server_tool(
    provider: Provider, chat: WebsocketCommunicator, user: Any
) -> None:
    call = ToolCall("get_weather", '{"city": "Paris"}', id="call_paris", chunk_size=5)
    final = ["Paris is ", "sunny, ", "21°C."]
    provider.server.script(ToolCallsReply([call]), TextReply(final))

    frames = await run_turn(chat, "r1", [user_message("u1", "What's the weather in Paris?")])

    pieces = call.argument_pieces()
    assert chunk_types(frames) == [
        "start", "start-step",
        "tool-input-start", *["tool-input-delta"] * len(pieces), "tool-input-available",
        "tool-output-available", "finish-step",
        "start-step", "text-start", *["text-delta"] * len(final), "text-end", "finish-step", "finish",
    ]
    body = chunks(frames)
    by_type = {c["type"]: c for c in body}
    assert by_type["tool-input-start"] == {
        "type": "tool-input-start", "toolCallId": "call_paris", "toolName": "get_weather",
    }
    deltas = [c for c in body if c["type"] == "tool-input-delta"]
    assert [d["inputTextDelta"] for d in deltas] == pieces
    assert {d["toolCallId"] for d in deltas} == {"call_paris"}
    assert by_type["tool-input-available"] == {
        "type": "tool-input-available", "toolCallId": "call_paris", "toolName": "get_weather",
        "input": {"city": "Paris"},
    }
    assert by_type["tool-output-available"] == {
        "type": "tool-output-available", "toolCallId": "call_paris", "output": "Paris: sunny, 21°C",
    }
    assert text_of(frames) == "".join(final)
    assert frames[-1]["done"] is True
    assert "outcome" not in frames[-1]

    # The second request carries the assistant's tool call and the tool's result back to the model.
    first, second = provider.server.requests
    assert system_prompt_of(first.body) == DemoAgent.system_prompt
    assert system_prompt_of(second.body) == DemoAgent.system_prompt
    assert second.stream is True
    assert second.messages[1] == {"role": "user", "content": "What's the weather in Paris?"}
    assistant, tool = second.messages[2:]
    assert assistant["role"] == "assistant"
    [sent_call] = assistant["tool_calls"]
    assert sent_call["id"] == "call_paris"
    assert sent_call["type"] == "function"
    assert sent_call["function"]["name"] == "get_weather"
    assert json.loads(sent_call["function"]["arguments"]) == {"city": "Paris"}
    assert tool == {"role": "tool", "tool_call_id": "call_paris", "content": "Paris: sunny, 21°C"}
    assert provider.server.pending == 0

    # Persisted as one assistant message: the settled tool part, then the text.
    stored = await get_messages(user)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    parts = stored[1]["parts"]
    assert [p["type"] for p in parts] == ["step-start", "tool-get_weather", "step-start", "text"]
    tool_part = parts[1]
    assert tool_part["toolCallId"] == "call_paris"
    assert tool_part["state"] == "output-available"
    assert tool_part["input"] == {"city": "Paris"}
    assert tool_part["output"] == "Paris: sunny, 21°C"
    assert parts[3] == {"type": "text", "text": "".join(final), "state": "done"}
    assert (await turn_of("r1")).status == Turn.Status.COMPLETED


async def test_two_tool_calls_in_one_response(provider: Provider, chat: WebsocketCommunicator) -> None:
    provider.server.script(
        ToolCallsReply([
            ToolCall("get_weather", '{"city": "Oslo"}', id="call_oslo"),
            ToolCall("get_weather", '{"city": "Lisbon"}', id="call_lisbon"),
        ]),
        TextReply(["Cold in Oslo, mild in Lisbon."]),
    )

    frames = await run_turn(chat, "r1", [user_message("u1", "Oslo and Lisbon?")])

    outputs = {c["toolCallId"]: c["output"] for c in chunks(frames) if c["type"] == "tool-output-available"}
    assert outputs == {"call_oslo": "Oslo: snow, -3°C", "call_lisbon": "Lisbon: clear, 18°C"}
    tool_messages = [m for m in provider.server.requests[1].messages if m["role"] == "tool"]
    assert {m["tool_call_id"]: m["content"] for m in tool_messages} == outputs
    assert text_of(frames) == "Cold in Oslo, mild in Lisbon."


async def test_turn_after_a_tool_turn_sends_the_tool_history(
    provider: Provider, chat: WebsocketCommunicator
) -> None:
    provider.server.script(
        ToolCallsReply([ToolCall("get_weather", '{"city": "Paris"}', id="call_paris")]),
        TextReply(["Sunny."]),
        TextReply(["You're welcome."]),
    )
    await run_turn(chat, "r1", [user_message("u1", "Weather in Paris?")])
    history = await stored_transcript()

    frames = await run_turn(chat, "r2", [*history, user_message("u2", "Thanks!")])

    assert (await turn_of("r2")).status == Turn.Status.COMPLETED, frames
    assert text_of(frames) == "You're welcome."
    sent = provider.server.requests[2].messages
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[3] == {"role": "tool", "tool_call_id": "call_paris", "content": "Paris: sunny, 21°C"}


# --- (c) authentication -----------------------------------------------------------------------------
async def test_api_key_is_sent_as_bearer_token(provider: Provider, chat: WebsocketCommunicator) -> None:
    provider.server.script(
        ToolCallsReply([ToolCall("get_weather", '{"city": "Oslo"}', id="call_1")]), TextReply(["Snow."]),
    )

    await run_turn(chat, "r1", [user_message("u1", "Oslo weather")])

    requests = provider.server.requests
    assert len(requests) == 2
    assert {r.headers["authorization"] for r in requests} == {f"Bearer {API_KEY}"}
    assert {r.headers["content-type"] for r in requests} == {"application/json"}


async def test_openai_compatible_without_a_key_sends_a_placeholder(
    fake_openai: FakeOpenAIServer, allow_model_requests: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_openai.script(TextReply(["ok"]))
    with override_settings(AGENT_MODEL_BASE_URL=fake_openai.base_url, AGENT_MODEL_API_KEY=None):
        model = get_model("openai-compatible:local-model")
    result = await Agent(model).run("ping")
    assert result.output == "ok"
    [request] = fake_openai.requests
    assert request.headers["authorization"] == "Bearer none"
    assert request.body["model"] == "local-model"
    assert request.stream is False


# --- (d) provider errors ----------------------------------------------------------------------------
async def test_provider_401_becomes_error_frames_and_the_next_turn_works(
    provider: Provider, chat: WebsocketCommunicator, user: Any
) -> None:
    provider.server.script(
        ErrorReply(401, "Incorrect API key provided: test-key.", type="invalid_request_error",
                   code="invalid_api_key"),
        TextReply(["Back ", "again."]),
    )

    frames = await run_turn(chat, "r1", [user_message("u1", "hello")])

    assert chunk_types(frames) == ["start"]
    error_text = assert_error_then_done(frames, "r1", "401", "Incorrect API key provided")
    assert frames[-1]["messageIds"] == ["u1"]
    assert len(provider.server.requests) == 1, "a 401 is not retried"
    turn = await turn_of("r1")
    assert turn.status == Turn.Status.ERROR
    assert turn.error == error_text

    # The server keeps working: the next turn on the same connection streams normally.
    history = await stored_transcript()
    frames = await run_turn(chat, "r2", [*history, user_message("u2", "hello again")])
    assert text_of(frames) == "Back again."
    assert frames[-1]["done"] is True
    assert "outcome" not in frames[-1]
    assert (await turn_of("r2")).status == Turn.Status.COMPLETED
    assert [m["id"] for m in await get_messages(user) if m["role"] == "user"] == ["u1", "u2"]


async def test_provider_500_is_retried_then_reported(
    provider: Provider, chat: WebsocketCommunicator
) -> None:
    failure = ErrorReply(500, "The server had an error while processing your request.", headers=FAST_RETRY)
    provider.server.script(failure, failure, failure, TextReply(["Recovered."]))

    frames = await run_turn(chat, "r1", [user_message("u1", "hello")])

    assert_error_then_done(frames, "r1", "500", "The server had an error")
    # The openai SDK's default: two retries of a 5xx, so three requests before the turn fails.
    assert len(provider.server.requests) == 3
    assert (await turn_of("r1")).status == Turn.Status.ERROR

    frames = await run_turn(chat, "r2", [*(await stored_transcript()), user_message("u2", "again")])
    assert text_of(frames) == "Recovered."
    assert (await turn_of("r2")).status == Turn.Status.COMPLETED


async def test_transient_500_is_retried_transparently(provider: Provider, chat: WebsocketCommunicator) -> None:
    provider.server.script(ErrorReply(500, "Overloaded", headers=FAST_RETRY), TextReply(["Fine."]))

    frames = await run_turn(chat, "r1", [user_message("u1", "hello")])

    assert not [f for f in frames if f.get("error")]
    assert text_of(frames) == "Fine."
    assert len(provider.server.requests) == 2
    assert (await turn_of("r1")).status == Turn.Status.COMPLETED


async def test_error_in_the_middle_of_the_stream(provider: Provider, chat: WebsocketCommunicator) -> None:
    provider.server.script(
        StreamErrorReply(["Partial ", "answer "], "The model crashed mid-stream."),
        TextReply(["Whole answer."]),
    )

    frames = await run_turn(chat, "r1", [user_message("u1", "hello")])

    # The text that arrived before the failure was streamed and closed, then the error in-band.
    assert chunk_types(frames) == ["start", "start-step", "text-start", "text-delta", "text-delta", "text-end"]
    assert text_of(frames) == "Partial answer "
    assert_error_then_done(frames, "r1", "The model crashed mid-stream.")
    assert (await turn_of("r1")).status == Turn.Status.ERROR
    # As the reference server does on a reader error, the partial reply is persisted.
    stored = await stored_transcript()
    assert stored[-1]["role"] == "assistant"
    assert [p.get("text") for p in stored[-1]["parts"] if p["type"] == "text"] == ["Partial answer "]

    frames = await run_turn(chat, "r2", [*(await stored_transcript()), user_message("u2", "again")])
    assert text_of(frames) == "Whole answer."
    assert (await turn_of("r2")).status == Turn.Status.COMPLETED


# --- get_model ----------------------------------------------------------------------------------------
def test_demo_is_the_offline_demo_model() -> None:
    model = get_model("demo")
    assert isinstance(model, FunctionModel)
    assert is_demo(model)
    with override_settings(AGENT_MODEL="demo"):
        assert is_demo(get_model())


def test_is_demo_is_false_for_other_models(fake_openai: FakeOpenAIServer) -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("hi")])

    assert not is_demo(FunctionModel(reply, model_name="something-else"))
    with override_settings(AGENT_MODEL_BASE_URL=fake_openai.base_url, AGENT_MODEL_API_KEY=API_KEY):
        assert not is_demo(get_model("openai-chat:gpt-4o-mini"))


@pytest.mark.parametrize("spec", ["nope:model", "gpt-4o", "openai-chatt:gpt-4o"])
def test_unknown_model_string_is_a_configuration_error(spec: str) -> None:
    with pytest.raises(AgentConfigurationError, match=f"AGENT_MODEL '{spec}' cannot be used"):
        get_model(spec)


def test_openai_compatible_needs_a_base_url() -> None:
    with (
        override_settings(AGENT_MODEL_BASE_URL=None),
        pytest.raises(AgentConfigurationError, match=r"openai-compatible:<model>' needs AGENT_MODEL_BASE_URL"),
    ):
        get_model("openai-compatible:qwen2.5")


def test_openai_without_a_key_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with (
        override_settings(AGENT_MODEL_BASE_URL=None),
        pytest.raises(AgentConfigurationError, match="OPENAI_API_KEY"),
    ):
        get_model("openai-chat:gpt-4o")


def test_base_url_redirects_openai_chat_models(fake_openai: FakeOpenAIServer) -> None:
    with override_settings(AGENT_MODEL_BASE_URL=fake_openai.base_url, AGENT_MODEL_API_KEY=API_KEY):
        model = get_model("openai-chat:gpt-4o-mini")
    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "gpt-4o-mini"
    assert model.base_url.rstrip("/") == fake_openai.base_url


def test_ollama_defaults_to_the_local_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_BASE_URL", raising=False)
    model = get_model("ollama:llama3.2")
    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "llama3.2"
    assert model.base_url.rstrip("/") == OLLAMA_DEFAULT_URL


async def test_ollama_uses_ollama_base_url(
    fake_openai: FakeOpenAIServer, allow_model_requests: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OLLAMA_BASE_URL", fake_openai.base_url)
    model = get_model("ollama:llama3.2")
    assert isinstance(model, OpenAIChatModel)
    assert model.model_name == "llama3.2"
    assert model.base_url.rstrip("/") == fake_openai.base_url

    # And it really talks there: a non-streamed run and a streamed one.
    fake_openai.script(TextReply(["Hi from llama."]), TextReply(["Streamed ", "llama."]))
    agent = Agent(model, instructions="Be brief.")
    assert (await agent.run("hello")).output == "Hi from llama."
    async with agent.run_stream("hello") as streamed:
        assert await streamed.get_output() == "Streamed llama."
    plain, stream = fake_openai.requests
    assert (plain.path, plain.body["model"], plain.stream) == (COMPLETIONS_PATH, "llama3.2", False)
    assert (stream.path, stream.body["model"], stream.stream) == (COMPLETIONS_PATH, "llama3.2", True)
    assert plain.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
