"""Recovery by provider with real processes: ``kill -9`` of the server streaming a real provider's reply.

The demo agent runs on a local provider server (``tests/support/fake_*_server.py``) speaking the
protocol for real; a reply is cut by killing its server process mid-stream, and a Celery worker
recovers it with the strategy of the model's provider (``agents_app/llm/recovery.py``). Each test
counts what the recovery cost at the provider: model requests, and output tokens generated (one
per streamed piece) against the reply's own.
"""

import asyncio
import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agents_app.llm.recovery import CONTINUE_PROMPT
from tests.crossprocess.test_recovery_processes import query, settled
from tests.support.fake_anthropic_server import FakeAnthropicServer
from tests.support.fake_openai_server import FakeOpenAIServer
from tests.support.fake_provider import ScriptedServer, TextReply
from tests.support.fake_responses_server import FakeResponsesServer
from tests.support.frames import chat_request, message_text, user_message
from tests.support.live import LiveStack, RedisServer, database_url
from tests.support.waiting import wait_until
from tests.support.wsclient import open_socket, recv_json

pytestmark = pytest.mark.crossprocess

PATIENCE = 120.0  # a loaded 2-core machine: every wait is for an event, this only bounds it
PATH = "/agents/demo-agent/story"
# The reply: 80 pieces, one every 40 ms (about 3 s), cut after DELTAS_BEFORE_KILL of them.
WHOLE = [f"w{i} " for i in range(80)]
REST = ["and ", "the ", "rest."]
DELTAS_BEFORE_KILL = 15


@dataclass
class Cut:
    """A stack whose demo agent talks to ``server``, ready for one reply to be cut."""

    stack: LiveStack
    url: str
    server: ScriptedServer


def cut_stack(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer, server: ScriptedServer,
              env: dict[str, str]) -> Iterator[Cut]:
    url = database_url(request, "sqlite", tmp_path, "providers")
    stack = LiveStack(tmp_path, redis.url, url, extra_env={
        "AGENT_MODEL_API_KEY": "test-key", "AGENT_RECOVERY_SWEEP_SECONDS": "1", "AGENT_LOG_LEVEL": "WARNING", **env,
    })
    stack.create_user("alice")
    server.chunk_delay = 0.04
    try:
        yield Cut(stack, url, server)
    finally:
        stack.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            stack.print_logs()


@pytest.fixture
def responses(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Iterator[Cut]:
    with FakeResponsesServer() as server:
        yield from cut_stack(request, tmp_path, redis, server,
                             {"AGENT_MODEL": "openai:gpt-5.2", "AGENT_MODEL_BASE_URL": server.base_url})


@pytest.fixture(params=["anthropic", "openai-chat"])
def synthetic(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Iterator[Cut]:
    """Anthropic Messages or OpenAI Chat Completions: both continue with a synthetic user message."""
    spec, server_class = {"anthropic": ("anthropic:claude-sonnet-4-5", FakeAnthropicServer),
                          "openai-chat": ("openai-chat:gpt-4o-mini", FakeOpenAIServer)}[request.param]
    with server_class() as server:
        yield from cut_stack(request, tmp_path, redis, server,
                             {"AGENT_MODEL": spec, "AGENT_MODEL_BASE_URL": server.base_url})


@pytest.fixture
def ollama(request: pytest.FixtureRequest, tmp_path: Path, redis: RedisServer) -> Iterator[Cut]:
    with FakeOpenAIServer() as server:
        yield from cut_stack(request, tmp_path, redis, server,
                             {"AGENT_MODEL": "ollama:llama3.2", "OLLAMA_BASE_URL": server.base_url})


def kill_mid_stream(cut: Cut) -> dict[str, Any]:
    """Stream the reply from one server process, kill it mid-reply, let a worker recover it; the
    stored reply."""
    doomed, survivor = cut.stack.start_server(), cut.stack.start_server()
    cut.stack.start_celery_worker("a")
    cut.stack.start_celery_beat()
    cookie = survivor.login("alice")

    async def scenario() -> None:
        observer = await open_socket(survivor.ws, PATH, cookie)
        sender = await open_socket(doomed.ws, PATH, cookie)
        await sender.send(json.dumps(chat_request("r1", [user_message("u1", "Tell me a story")])))
        deltas = 0
        while deltas < DELTAS_BEFORE_KILL:
            frame = await recv_json(sender, timeout=PATIENCE)
            deltas += frame.get("type") == "cf_agent_use_chat_response" and '"text-delta"' in frame.get("body", "")
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
        while True:  # the observer, on the other process, sees the recovery end
            frame = await recv_json(observer, timeout=PATIENCE)
            if frame.get("type") == "cf_agent_chat_recovering" and not frame["recovering"]:
                break
        await observer.close()

    asyncio.run(scenario())
    wait_until(lambda: settled(cut.url), "the recovery to end", timeout=PATIENCE)
    history = survivor.get_json(f"{PATH}/get-messages", cookie)
    assert [m["role"] for m in history] == ["user", "assistant"], history
    assert query(cut.url, "SELECT status FROM agents_app_recoveryincident") == [("completed",)]
    return history[1]


def text_of_content(content: str | list[dict[str, Any]]) -> str:
    """A message's text, as Chat Completions (a string) or Anthropic (text blocks) sends it."""
    return content if isinstance(content, str) else "".join(block["text"] for block in content)


def assert_continued(partial: dict[str, Any], reply: dict[str, Any]) -> None:
    """``partial``, the second request's assistant message, is the start of the reply that was cut
    (as much as was stored at the kill: the stream buffer's crash window may lose a few pieces),
    and the stored reply is that partial and the continuation's rest."""
    assert partial["role"] == "assistant"
    sent = text_of_content(partial["content"])
    assert "".join(WHOLE).startswith(sent)
    assert 0 < len(sent.split()) < len(WHOLE)
    assert message_text(reply) == sent + "".join(REST)


def report(strategy: str, server: ScriptedServer, requests: int) -> None:
    print(f"\n{strategy}: {requests} model requests, {server.generated} output tokens generated "
          f"for a reply of {len(WHOLE)} (+{len(REST)} continued)")


def test_responses_api_fetches_the_completed_response(responses: Cut) -> None:
    server = responses.server
    assert isinstance(server, FakeResponsesServer)
    server.script(TextReply(WHOLE))

    reply = kill_mid_stream(responses)

    # One generation, whole: the recovery fetched it and streamed what the cut had not shown.
    assert message_text(reply) == "".join(WHOLE)
    [created] = server.requests
    assert created.body["background"] is True
    # Fetched once it had completed: a recovery that finds it still running polls it until it is.
    assert server.retrievals and set(server.retrievals) == {"resp_fake1"}
    assert reply["metadata"]["providerResponseId"] == "resp_fake1"
    assert server.disconnects == 1
    assert server.generated == len(WHOLE), "no token generated twice"
    report("retrieve", server, len(server.requests))
    print(f"retrieve: the response fetched {len(server.retrievals)} time(s) until it had completed")


def test_a_synthetic_user_message_continues_the_partial(synthetic: Cut) -> None:
    server = synthetic.server
    server.script(TextReply(WHOLE), TextReply(REST))

    reply = kill_mid_stream(synthetic)

    _, second = server.requests
    *_, partial, ask = second.body["messages"]
    assert (ask["role"], text_of_content(ask["content"])) == ("user", CONTINUE_PROMPT)
    assert_continued(partial, reply)
    # The cut stream stopped generating when its client died; the continuation generated the rest.
    assert server.disconnects == 1
    assert server.generated < len(WHOLE) + len(REST)
    report("synthetic", server, len(server.requests))


def test_ollama_continues_the_partial_by_prefill(ollama: Cut) -> None:
    server = ollama.server
    server.script(TextReply(WHOLE), TextReply(REST))

    reply = kill_mid_stream(ollama)

    _, second = server.requests
    *_, user, partial = second.messages
    assert user == {"role": "user", "content": "Tell me a story"}
    assert_continued(partial, reply)  # the request ends with the partial reply: the model continues it
    assert server.disconnects == 1
    report("prefill", server, len(server.requests))
