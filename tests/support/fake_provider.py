"""What the local provider servers share: the scripted replies, the request log, HTTP and SSE.

Each server (``fake_openai_server`` for Chat Completions, ``fake_responses_server`` for OpenAI's
Responses API, ``fake_anthropic_server`` for Anthropic Messages) is a real HTTP server on
127.0.0.1 that the provider SDKs talk to as they would to the vendor. Tests script the replies
in order with the provider-neutral types below (``server.script(TextReply([...]), ...)``); each
server writes them in its own wire format, and records every request it receives
(``server.requests``). A request with nothing scripted left gets a 500 saying so, so a test that
under-scripts fails loudly instead of hanging.

Only the standard library: ``http.server`` in a daemon thread, HTTP/1.1, chunked transfer
encoding for streams (as the vendors send them) and keep-alive between requests.
"""

import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Self


# --- scripted replies (provider-neutral) ------------------------------------------------------------
@dataclass(frozen=True)
class TextReply:
    """An assistant text answer, streamed as one delta per piece; ``reasoning`` pieces stream first
    (a thinking block, a reasoning summary) where the protocol has them."""

    pieces: Sequence[str]
    finish_reason: str = "stop"
    reasoning: Sequence[str] = ()

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
    """An assistant answer made of tool calls, after any ``reasoning`` pieces."""

    calls: Sequence[ToolCall]
    finish_reason: str = "tool_calls"
    reasoning: Sequence[str] = ()


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with the protocol's error body; ``type`` is the vendor's error type."""

    status: int
    message: str
    type: str = "server_error"
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamErrorReply:
    """A stream that starts fine (``pieces`` of text) and then fails in-band, in the protocol's way
    (an ``error`` data line, an ``event: error``, a ``response.failed``). A non-streamed request
    gets the error as an HTTP 500."""

    pieces: Sequence[str]
    message: str
    type: str = "server_error"
    code: str | None = None


@dataclass(frozen=True)
class CutReply:
    """A stream that starts fine (``pieces`` of text) and then breaks: the connection closes with
    no terminal event, as when a proxy or the vendor drops it."""

    pieces: Sequence[str]


Reply = TextReply | ToolCallsReply | ErrorReply | StreamErrorReply | CutReply


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


class StreamCut(Exception):
    """Raised by a server's event writer to drop the connection mid-stream (``CutReply``)."""


# --- the server ---------------------------------------------------------------------------------------
class ScriptedServer:
    """A real HTTP server answering a provider's endpoints from a script.

    Subclasses name their endpoints (``post_paths``) and answer one request (``answer``) with the
    handler's writers (``send_json``, ``start_stream``/``write_event``/``end_stream``). Use as a
    context manager (or ``start()``/``stop()``).
    """

    name: ClassVar[str] = "fake-provider"
    post_paths: ClassVar[tuple[str, ...]] = ()

    def __init__(self, *, chunk_delay: float = 0.0, input_tokens: int = 11, output_tokens: int = 7) -> None:
        self.chunk_delay = chunk_delay
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        # Streams whose client went away before their end (a cancelled turn closing its request).
        self.disconnects = 0
        # Output tokens generated, counting one per streamed piece (text, arguments, reasoning), sent
        # or not: what the replies cost. A reply cut by its client stops generating unless it runs
        # in the background (``generated`` goes on while ``disconnects`` counts the cut).
        self.generated = 0
        # Files served on GET (path -> media type, bytes): what a model provider fetches by URL.
        self.files: dict[str, tuple[str, bytes]] = {}
        self.downloads: list[str] = []
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"fake": self})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        # Keep-alive connections left open by a client must not block stop().
        httpd.block_on_close = False
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name=self.name, daemon=True)
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    # --- script and records ---------------------------------------------------------------------
    def script(self, *replies: Reply) -> None:
        """Queue replies; each request to a scripted endpoint takes the next one."""
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

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def next_reply(self) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        return ErrorReply(500, f"{self.name}: no scripted reply left for this request")

    def new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids)}"

    # --- the protocol (subclasses) ----------------------------------------------------------------
    def accepts(self, path: str) -> bool:
        """The server answers a POST to ``path`` (else a 404)."""
        return path in self.post_paths

    def answer(self, handler: "_Handler", request: RecordedRequest) -> None:
        """Answer one POST to a path it ``accepts``."""
        raise NotImplementedError

    def answer_get(self, handler: "_Handler", path: str) -> None:
        """Answer a GET; by default every GET is a 404."""
        handler.send_error_reply(ErrorReply(404, f"Invalid URL (GET {path})", type="invalid_request_error"))

    def error_body(self, reply: ErrorReply | StreamErrorReply) -> dict[str, Any]:
        """The protocol's JSON error body for ``reply``."""
        raise NotImplementedError

    def is_piece(self, data: dict[str, Any] | str) -> bool:
        """The event carries a generated piece (counted in ``generated``)."""
        raise NotImplementedError


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: ScriptedServer

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
        request = RecordedRequest(
            method="POST", path=path, headers={k.lower(): v for k, v in self.headers.items()}, body=body,
        )
        self.fake.record(request)
        if not self.fake.accepts(path):
            self.send_error_reply(ErrorReply(404, f"Invalid URL (POST {path})", type="invalid_request_error"))
            return
        try:
            self.fake.answer(self, request)
        except StreamCut:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            with self.fake._lock:
                self.fake.disconnects += 1

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in self.fake.files:
            media_type, data = self.fake.files[path]
            self.fake.downloads.append(path)
            self.send_response(200)
            self.send_header("Content-Type", media_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.fake.answer_get(self, path)

    # --- writers --------------------------------------------------------------------------------
    def send_json(self, status: int, data: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
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

    def send_error_reply(self, reply: ErrorReply) -> None:
        self.send_json(reply.status, self.fake.error_body(reply), reply.headers)

    def start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", "req_fakestream")
        self.end_headers()

    def write_event(self, data: dict[str, Any] | str, event: str | None = None) -> None:
        """One server-sent event (``event:`` line if named), as one HTTP chunk; then the server's pace."""
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        frame = (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
        encoded = frame.encode()
        if self.fake.is_piece(data):
            with self.fake._lock:
                self.fake.generated += 1
        self.wfile.write(f"{len(encoded):X}\r\n".encode() + encoded + b"\r\n")
        self.wfile.flush()
        if self.fake.chunk_delay:
            time.sleep(self.fake.chunk_delay)

    def write_events(self, events: Iterable[tuple[str | None, dict[str, Any] | str]]) -> None:
        for event, data in events:
            self.write_event(data, event)

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut_stream(self) -> None:
        """Drop the connection without the chunked body's terminator: the client sees a broken stream."""
        self.wfile.flush()
        raise StreamCut
