"""A scripted OpenAI Chat Completions server on 127.0.0.1, for testing provider code for real.

The provider code under test talks HTTP to it exactly as it would to api.openai.com (or vLLM,
LM Studio, Ollama): ``POST /v1/chat/completions``, answered either with one JSON completion or,
for ``"stream": true``, with Server-Sent Events in OpenAI's wire format::

    data: {"id":"chatcmpl-1","object":"chat.completion.chunk",...,
           "choices":[{"index":0,"delta":{"role":"assistant","content":""},...}]}   (one line)
    data: {... "delta":{"content":"Hel"} ...}
    data: {... "delta":{},"finish_reason":"stop" ...}
    data: {... "choices":[],"usage":{...}}          (only with stream_options.include_usage)
    data: [DONE]

Tests script the replies in order (``server.script(TextReply([...]), ToolCallsReply([...]))``) and
read back every request the server received (``server.requests``): bodies, headers, path. A
request with nothing scripted left is answered with a 500 whose message says so, so a test that
under-scripts fails loudly instead of hanging.

The HTTP machinery and the reply types are shared with the other providers' servers
(``tests/support/fake_provider.py``).
"""

import time
from collections.abc import Iterator
from typing import Any

from tests.support.fake_provider import (
    CutReply,
    ErrorReply,
    RecordedRequest,
    ScriptedServer,
    StreamErrorReply,
    TextReply,
    ToolCall,
    ToolCallsReply,
    _Handler,
)

__all__ = [
    "COMPLETIONS_PATH", "CutReply", "ErrorReply", "FakeOpenAIServer", "StreamErrorReply", "TextReply", "ToolCall",
    "ToolCallsReply",
]

COMPLETIONS_PATH = "/v1/chat/completions"
SYSTEM_FINGERPRINT = "fp_fake0001"


class FakeOpenAIServer(ScriptedServer):
    """A real HTTP server speaking OpenAI Chat Completions, answering from a script.

    Use as a context manager (or ``start()``/``stop()``)::

        with FakeOpenAIServer() as server:
            server.script(TextReply(["Hello", " world"]))
            ... point the client at server.base_url ...
            assert server.requests[0].body["stream"] is True
    """

    name = "fake-openai"
    post_paths = (COMPLETIONS_PATH,)

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"{self.url}/v1"

    def _new_id(self) -> str:
        return self.new_id("chatcmpl-fake")

    def error_body(self, reply: ErrorReply | StreamErrorReply) -> dict[str, Any]:
        return {"error": {"message": reply.message, "type": reply.type, "param": None, "code": reply.code}}

    def is_piece(self, data: dict[str, Any] | str) -> bool:
        if not isinstance(data, dict) or not data.get("choices"):
            return False
        delta = data["choices"][0]["delta"]
        return bool(delta.get("content") or any(c["function"].get("arguments") for c in delta.get("tool_calls") or []))

    def answer(self, handler: _Handler, request: RecordedRequest) -> None:
        body = request.body
        model = str(body.get("model", ""))
        reply = self.next_reply()
        if isinstance(reply, ErrorReply):
            handler.send_error_reply(reply)
        elif isinstance(reply, StreamErrorReply | CutReply) and not request.stream:
            message = reply.message if isinstance(reply, StreamErrorReply) else "stream cut"
            handler.send_error_reply(ErrorReply(500, message))
        elif isinstance(reply, StreamErrorReply | CutReply):
            # The text so far, without the finish chunk; then the in-band error, or nothing at all.
            handler.start_stream()
            for data in list(self.stream_chunks(TextReply(reply.pieces), model, include_usage=False))[:-1]:
                handler.write_event(data)
            if isinstance(reply, CutReply):
                handler.cut_stream()
            handler.write_event(self.error_body(reply))
            handler.end_stream()
        elif request.stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            handler.start_stream()
            for data in self.stream_chunks(reply, model, include_usage):
                handler.write_event(data)
            handler.write_event("[DONE]")
            handler.end_stream()
        else:
            handler.send_json(200, self.completion(reply, model))

    # --- wire format ----------------------------------------------------------------------------
    def completion(self, reply: TextReply | ToolCallsReply, model: str) -> dict[str, Any]:
        """The non-streamed ``chat.completion`` object for ``reply``."""
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None, "annotations": []}
        if isinstance(reply, TextReply):
            message["content"] = reply.text
        else:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.calls
            ]
        return {
            "id": self._new_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
            "usage": self._usage(),
            "service_tier": "default",
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }

    def stream_chunks(self, reply: TextReply | ToolCallsReply, model: str,
                      include_usage: bool) -> Iterator[dict[str, Any]]:
        """The ``chat.completion.chunk`` objects OpenAI streams for ``reply``, in order."""
        completion_id, created = self._new_id(), int(time.time())

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            data: dict[str, Any] = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "service_tier": "default",
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            if include_usage:
                data["usage"] = None
            return data

        # Reasoning as vLLM and DeepSeek stream it: ``reasoning_content`` deltas before the answer.
        for piece in reply.reasoning:
            yield chunk({"role": "assistant", "content": None, "reasoning_content": piece})
        if isinstance(reply, TextReply):
            yield chunk({"role": "assistant", "content": "", "refusal": None})
            for piece in reply.pieces:
                yield chunk({"content": piece})
        else:
            for index, call in enumerate(reply.calls):
                first, *rest = call.argument_pieces()
                opening = {
                    "index": index, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }
                if index == 0:
                    yield chunk({"role": "assistant", "content": None, "tool_calls": [opening], "refusal": None})
                else:
                    yield chunk({"tool_calls": [opening]})
                for piece in [first, *rest]:
                    if piece:
                        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        yield chunk({}, reply.finish_reason)
        if include_usage:
            yield {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "service_tier": "default",
                "system_fingerprint": SYSTEM_FINGERPRINT,
                "choices": [],
                "usage": self._usage(),
            }

    def _usage(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.input_tokens,
            "completion_tokens": self.output_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
            },
        }
