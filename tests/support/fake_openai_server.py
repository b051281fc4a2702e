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

Only the standard library is used: ``http.server`` in a daemon thread, HTTP/1.1 with chunked
transfer encoding for streams (as OpenAI's servers send them) and keep-alive between requests.
"""

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

COMPLETIONS_PATH = "/v1/chat/completions"
SYSTEM_FINGERPRINT = "fp_fake0001"


@dataclass(frozen=True)
class TextReply:
    """An assistant text answer, streamed as one content delta per piece."""

    pieces: Sequence[str]
    finish_reason: str = "stop"

    @property
    def text(self) -> str:
        return "".join(self.pieces)


@dataclass(frozen=True)
class ToolCall:
    """One function call; its JSON ``arguments`` are streamed in slices of ``chunk_size`` characters."""

    name: str
    arguments: str
    id: str
    chunk_size: int = 8

    def argument_pieces(self) -> list[str]:
        size = max(1, self.chunk_size)
        return [self.arguments[i:i + size] for i in range(0, len(self.arguments), size)] or [""]


@dataclass(frozen=True)
class ToolCallsReply:
    """An assistant answer made of tool calls (``finish_reason: "tool_calls"``)."""

    calls: Sequence[ToolCall]
    finish_reason: str = "tool_calls"


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""

    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamErrorReply:
    """A stream that starts fine (``pieces`` of text) and then fails in-band, as OpenAI does.

    After the text deltas the server sends ``data: {"error": {...}}`` and ends the stream without
    ``[DONE]``. A non-streamed request gets the error as an HTTP 500.
    """

    pieces: Sequence[str]
    message: str
    type: str = "server_error"
    code: str | None = None


Reply = TextReply | ToolCallsReply | ErrorReply | StreamErrorReply


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: method, path, headers (lower-cased names) and the JSON body."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


class FakeOpenAIServer:
    """A real HTTP server speaking OpenAI Chat Completions, answering from a script.

    Use as a context manager (or ``start()``/``stop()``)::

        with FakeOpenAIServer() as server:
            server.script(TextReply(["Hello", " world"]))
            ... point the client at server.base_url ...
            assert server.requests[0].body["stream"] is True
    """

    def __init__(self, *, chunk_delay: float = 0.0, prompt_tokens: int = 11, completion_tokens: int = 7) -> None:
        self.chunk_delay = chunk_delay
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "FakeOpenAIServer":
        handler = type("Handler", (_Handler,), {"fake": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        # Keep-alive connections left open by a client must not block stop().
        httpd.block_on_close = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- addresses ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"{self.url}/v1"

    # --- script and records ---------------------------------------------------------------------
    def script(self, *replies: Reply) -> None:
        """Queue replies; each request to the completions endpoint takes the next one."""
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        with self._lock:
            return len(self._script)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        return ErrorReply(500, "fake OpenAI server: no scripted reply left for this request")

    def _new_id(self) -> str:
        return f"chatcmpl-fake{next(self._ids)}"

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
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
            },
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-openai/1.0"
    fake: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: test output stays readable."""

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            body = {"_raw": raw.decode(errors="replace")}
        path = self.path.split("?", 1)[0]
        self.fake._record(RecordedRequest(
            method="POST", path=path, headers={k.lower(): v for k, v in self.headers.items()}, body=body,
        ))
        if path != COMPLETIONS_PATH:
            self._send_error(ErrorReply(404, f"Invalid URL (POST {path})", type="invalid_request_error"))
            return
        reply = self.fake._next_reply()
        if isinstance(reply, ErrorReply):
            self._send_error(reply)
        elif isinstance(reply, StreamErrorReply):
            if body.get("stream"):
                self._send_stream_error(reply, str(body.get("model", "")))
            else:
                self._send_error(ErrorReply(500, reply.message, type=reply.type, code=reply.code))
        elif body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(self.fake.stream_chunks(reply, str(body.get("model", "")), include_usage))
        else:
            self._send_json(200, self.fake.completion(reply, str(body.get("model", ""))))

    def do_GET(self) -> None:
        self._send_error(ErrorReply(404, f"Invalid URL (GET {self.path})", type="invalid_request_error"))

    def _send_json(self, status: int, data: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("x-request-id", f"req_fake{id(data)}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _send_error(self, reply: ErrorReply) -> None:
        error = {"message": reply.message, "type": reply.type, "param": None, "code": reply.code}
        self._send_json(reply.status, {"error": error}, reply.headers)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_fakestream")
        self.end_headers()

    def _send_stream(self, chunks: Iterator[dict[str, Any]]) -> None:
        self._start_stream()
        for data in chunks:
            self._write_event(json.dumps(data, separators=(",", ":")))
            if self.fake.chunk_delay:
                time.sleep(self.fake.chunk_delay)
        self._write_event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_stream_error(self, reply: StreamErrorReply, model: str) -> None:
        partial = TextReply(reply.pieces)
        chunks = list(self.fake.stream_chunks(partial, model, include_usage=False))[:-1]  # no finish chunk
        self._start_stream()
        for data in chunks:
            self._write_event(json.dumps(data, separators=(",", ":")))
        error = {"message": reply.message, "type": reply.type, "param": None, "code": reply.code}
        self._write_event(json.dumps({"error": error}, separators=(",", ":")))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_event(self, data: str) -> None:
        event = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(event):X}\r\n".encode() + event + b"\r\n")
        self.wfile.flush()
