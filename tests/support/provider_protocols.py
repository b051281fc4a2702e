"""The provider protocols the tests drive turns through, and how to read what each server received.

``PROTOCOLS`` names one ``AGENT_MODEL`` per wire protocol our provider code speaks: OpenAI Chat
Completions (``openai-chat:``, and ``openai-compatible:`` as vLLM/Ollama are reached), OpenAI's
Responses API (``openai:``) and Anthropic Messages (``anthropic:``). Each ``Protocol`` starts its
local server (``tests/support/fake_*_server.py``) and reads a recorded request in a
provider-neutral way (the tool results sent back, the user's content, the reasoning replayed), so
that one feature test can run on every protocol while still asserting the provider's own format.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import override_settings
from pydantic_ai import models

from tests.support.fake_anthropic_server import FakeAnthropicServer, signature_of
from tests.support.fake_openai_server import FakeOpenAIServer
from tests.support.fake_provider import RecordedRequest, ScriptedServer
from tests.support.fake_responses_server import FakeResponsesServer, encrypted_of

API_KEY = "test-key"


class _AnyId(str):
    """Equal to any reasoning item id the server made (``rs_…``)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("rs_")

    __hash__ = str.__hash__


ANY_ID = _AnyId("rs_*")


def _text(content: Any) -> str:
    """A tool result's or message's content as text (a string, or a list of text blocks)."""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


@dataclass(frozen=True)
class Protocol:
    """One wire protocol: the ``AGENT_MODEL`` that selects it and how to read its requests."""

    key: str
    spec: str
    server: Callable[[], ScriptedServer]

    @property
    def model_name(self) -> str:
        return self.spec.partition(":")[2]

    # --- what a request carried ------------------------------------------------------------------
    def tool_results(self, request: RecordedRequest) -> dict[str, str]:
        """The tool results the request sends back to the model, by call id."""
        body = request.body
        if self.key == "anthropic":
            return {block["tool_use_id"]: _text(block["content"])
                    for message in body["messages"] if message["role"] == "user"
                    and isinstance(message["content"], list)
                    for block in message["content"] if block.get("type") == "tool_result"}
        if self.key == "openai-responses":
            return {item["call_id"]: _text(item["output"]) for item in body["input"]
                    if item.get("type") == "function_call_output"}
        return {m["tool_call_id"]: _text(m["content"]) for m in body["messages"] if m["role"] == "tool"}

    def user_contents(self, request: RecordedRequest) -> list[Any]:
        """The content of each user message of the request, in the provider's format."""
        body = request.body
        if self.key == "openai-responses":
            return [item["content"] for item in body["input"] if item.get("role") == "user"]
        return [m["content"] for m in body["messages"] if m["role"] == "user"]

    def replayed_reasoning(self, request: RecordedRequest) -> list[dict[str, Any]]:
        """The reasoning the request sends back: Anthropic's thinking blocks, Responses' reasoning items."""
        body = request.body
        if self.key == "anthropic":
            return [block for message in body["messages"] if message["role"] == "assistant"
                    and isinstance(message["content"], list)
                    for block in message["content"] if block.get("type") in ("thinking", "redacted_thinking")]
        if self.key == "openai-responses":
            return [item for item in body["input"] if item.get("type") == "reasoning"]
        return [{"reasoning_content": m["reasoning_content"]} for m in body["messages"]
                if m["role"] == "assistant" and "reasoning_content" in m]

    def signed_reasoning(self, text: str) -> dict[str, Any]:
        """The block, item or field a request must carry back for reasoning ``text`` the server produced."""
        if self.key == "anthropic":
            return {"type": "thinking", "thinking": text, "signature": signature_of(text)}
        if self.key not in SIGNED_REASONING_PROTOCOLS:  # Chat Completions: the field it came in, unsigned
            return {"reasoning_content": text}
        summary = [{"type": "summary_text", "text": text}] if text else []
        return {"type": "reasoning", "id": ANY_ID, "summary": summary, "encrypted_content": encrypted_of(text)}

    def files_sent(self, content: Any) -> list[tuple[str, str | None, str]]:
        """A user message's content as (kind, media type, data or URL) per block, whatever the format:
        kind ``image``, ``document`` or ``text``; the data is base64 (inline) or the URL (by reference)."""
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        return [_file_block(self.key, block) for block in blocks]

    def auth(self, request: RecordedRequest) -> str:
        """The API key the request carried (Anthropic's SDK sends ``x-api-key`` or, lately, a bearer token)."""
        return request.headers.get("x-api-key") or request.headers["authorization"].removeprefix("Bearer ")


def _split_data_url(url: str) -> tuple[str | None, str]:
    if not url.startswith("data:"):
        return None, url
    header, _, data = url.partition(",")
    return header.removeprefix("data:").removesuffix(";base64"), data


def _file_block(key: str, block: dict[str, Any]) -> tuple[str, str | None, str]:
    kind = block.get("type")
    if kind in ("text", "input_text"):
        return "text", None, block["text"]
    if key == "anthropic":
        source = block["source"]
        if source["type"] == "base64":
            return ("image" if kind == "image" else "document"), source["media_type"], source["data"]
        return ("image" if kind == "image" else "document"), None, source["url"]
    if kind == "image_url":  # Chat Completions
        return ("image", *_split_data_url(block["image_url"]["url"]))
    if kind == "input_image":  # Responses
        return ("image", *_split_data_url(block["image_url"]))
    if kind == "file":  # Chat Completions
        return ("document", *_split_data_url(block["file"]["file_data"]))
    if kind == "input_file":  # Responses
        return ("document", *_split_data_url(block.get("file_data") or block.get("file_url", "")))
    raise AssertionError(f"unexpected content block {block}")


PROTOCOLS = {
    "openai-chat": Protocol("openai-chat", "openai-chat:gpt-4o-mini", FakeOpenAIServer),
    "openai-compatible": Protocol("openai-compatible", "openai-compatible:qwen2.5-7b-instruct", FakeOpenAIServer),
    "openai-responses": Protocol("openai-responses", "openai:gpt-5.2", FakeResponsesServer),
    "anthropic": Protocol("anthropic", "anthropic:claude-sonnet-4-5", FakeAnthropicServer),
}
# The protocols that stream reasoning the next request carries back: thinking blocks, reasoning
# summaries, and the ``reasoning_content`` of OpenAI-compatible servers (vLLM, DeepSeek).
REASONING_PROTOCOLS = ("openai-compatible", "openai-responses", "anthropic")
# Those whose reasoning is signed (a signature, encrypted content) even when it shows no text.
SIGNED_REASONING_PROTOCOLS = ("openai-responses", "anthropic")


@contextmanager
def running(key: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Protocol, ScriptedServer]]:
    """The protocol's server running, with ``AGENT_MODEL`` (and its base URL and key) pointing at it.

    tests/conftest.py forbids real model requests; these go to the local server only.
    """
    monkeypatch.setattr(models, "ALLOW_MODEL_REQUESTS", True)
    protocol = PROTOCOLS[key]
    with protocol.server() as server, override_settings(
        AGENT_MODEL=protocol.spec, AGENT_MODEL_BASE_URL=server.base_url, AGENT_MODEL_API_KEY=API_KEY,
    ):
        yield protocol, server

