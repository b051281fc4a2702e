"""A scripted OpenAI Responses API server on 127.0.0.1, for testing provider code for real.

The ``openai`` SDK (through pydantic-ai's ``OpenAIResponsesModel``, the ``openai:`` models) talks
to it as to api.openai.com: ``POST /v1/responses``, answered for ``"stream": true`` with the typed
events of OpenAI's Responses streaming reference, each with its ``sequence_number``::

    response.created / response.in_progress                 {"response": {"id": "resp_…", "status": …}}
    response.output_item.added  {"item": {"type": "reasoning", "id": "rs_…"}}
    response.reasoning_summary_part.added / _text.delta / _text.done / _part.done
    response.output_item.done   {"item": {"type": "reasoning", "summary": […], "encrypted_content": …}}
    response.output_item.added  {"item": {"type": "message", "id": "msg_…"}}, response.content_part.added,
    response.output_text.delta  {"item_id": "msg_…", "delta": "Hel"}, response.output_text.done, …
    response.output_item.added  {"item": {"type": "function_call", "call_id": "call_…", "name": …}},
    response.function_call_arguments.delta / .done, response.output_item.done
    response.completed          {"response": {"status": "completed", "output": […], "usage": {…}}}

An in-band failure is ``response.failed`` (``{"response": {"status": "failed", "error": {code,
message}}}``); HTTP errors carry ``{"error": {message, type, param, code}}``. The shapes follow the
SDK's ``ResponseStreamEvent`` types. Every response is kept, and ``GET /v1/responses/{id}``
returns it as it stands (how a client fetches a stored response instead of generating it again).
A response created with ``"background": true`` goes on to its end when its client goes away, as
OpenAI's background mode does.
"""

import hashlib
import threading
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
    ToolCallsReply,
    _Handler,
)

RESPONSES_PATH = "/v1/responses"
ENCRYPTED_INCLUDE = "reasoning.encrypted_content"

Event = tuple[None, dict[str, Any]]
# The events that carry a generated piece (``ScriptedServer.generated``).
PIECES = frozenset({"response.output_text.delta", "response.function_call_arguments.delta",
                    "response.reasoning_summary_text.delta"})


def encrypted_of(summary: str) -> str:
    """The opaque ``encrypted_content`` the server gives a reasoning item (deterministic, for tests)."""
    return "enc_" + hashlib.sha256(summary.encode()).hexdigest()[:32]


class FakeResponsesServer(ScriptedServer):
    """A real HTTP server speaking OpenAI's Responses API, answering from a script."""

    name = "fake-openai-responses"
    post_paths = (RESPONSES_PATH,)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._stored: dict[str, dict[str, Any]] = {}
        self._stored_lock = threading.Lock()
        self.retrievals: list[str] = []
        # Responses cancelled by ``POST /v1/responses/{id}/cancel``: their generation stops.
        self.cancelled: list[str] = []

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as ``base_url``."""
        return f"{self.url}/v1"

    def stored(self, response_id: str) -> dict[str, Any] | None:
        with self._stored_lock:
            return self._stored.get(response_id)

    def complete(self, reply: TextReply | ToolCallsReply, model: str) -> str:
        """Generate ``reply`` as a finished response nobody streamed (a background job done while its
        client was gone); its id."""
        *_, (_, done) = self.stream_events(reply, {"model": model, "background": True}, encrypted=False)
        self._store(done["response"])
        return str(done["response"]["id"])

    def _store(self, response: dict[str, Any]) -> None:
        with self._stored_lock:
            self._stored[response["id"]] = response

    def error_body(self, reply: ErrorReply | StreamErrorReply) -> dict[str, Any]:
        return {"error": {"message": reply.message, "type": reply.type, "param": None, "code": reply.code}}

    def answer_get(self, handler: _Handler, path: str) -> None:
        response_id = path.removeprefix(f"{RESPONSES_PATH}/")
        stored = self.stored(response_id) if path.startswith(f"{RESPONSES_PATH}/") else None
        if stored is None:
            super().answer_get(handler, path)
            return
        self.retrievals.append(response_id)
        handler.send_json(200, stored)

    def is_piece(self, data: dict[str, Any] | str) -> bool:
        return isinstance(data, dict) and data.get("type") in PIECES

    def accepts(self, path: str) -> bool:
        return path in self.post_paths or (path.startswith(f"{RESPONSES_PATH}/") and path.endswith("/cancel"))

    def _answer_cancel(self, handler: _Handler, path: str) -> None:
        response_id = path.removeprefix(f"{RESPONSES_PATH}/").removesuffix("/cancel")
        stored = self.stored(response_id)
        if stored is None:
            handler.send_error_reply(ErrorReply(404, f"No response with id '{response_id}'.",
                                                type="invalid_request_error"))
            return
        with self._stored_lock:
            self.cancelled.append(response_id)
        self._store({**stored, "status": "cancelled"})
        handler.send_json(200, {**stored, "status": "cancelled"})

    def answer(self, handler: _Handler, request: RecordedRequest) -> None:
        if request.path != RESPONSES_PATH:
            self._answer_cancel(handler, request.path)
            return
        body = request.body
        reply = self.next_reply()
        if isinstance(reply, ErrorReply):
            handler.send_error_reply(reply)
            return
        encrypted = ENCRYPTED_INCLUDE in (body.get("include") or [])
        if isinstance(reply, StreamErrorReply | CutReply):
            if not request.stream:
                handler.send_error_reply(ErrorReply(500, getattr(reply, "message", "stream cut")))
                return
            events = list(self.stream_events(TextReply(reply.pieces), body, encrypted))
            response = events[-1][1]["response"]
            handler.start_stream()
            handler.write_events(events[:-4])  # up to the message's last text delta
            if isinstance(reply, CutReply):
                handler.cut_stream()
            error = {"code": reply.code or "server_error", "message": reply.message}
            failed = {**response, "status": "failed", "error": error, "output": []}
            self._store(failed)
            handler.write_event({"type": "response.failed", "sequence_number": len(events) - 4, "response": failed})
            handler.end_stream()
        elif request.stream:
            handler.start_stream()
            gone, current = False, None
            for _, data in self.stream_events(reply, body, encrypted):
                current = data["response"]["id"] if "response" in data else current
                if current in self.cancelled:
                    break
                if data["type"] in ("response.created", "response.completed"):
                    self._store(data["response"])
                if gone:  # a background response is generated to its end without its client
                    self._generate_unsent(data)
                    continue
                try:
                    handler.write_event(data)
                except (BrokenPipeError, ConnectionResetError):
                    if not body.get("background"):
                        raise
                    gone = True
                    with self._lock:
                        self.disconnects += 1
            if not gone:
                handler.end_stream()
        else:
            *_, (_, completed) = self.stream_events(reply, body, encrypted)
            self._store(completed["response"])
            handler.send_json(200, completed["response"])

    def _generate_unsent(self, data: dict[str, Any]) -> None:
        if self.is_piece(data):
            with self._lock:
                self.generated += 1
        if self.chunk_delay:
            time.sleep(self.chunk_delay)

    # --- wire format ----------------------------------------------------------------------------
    def _response(self, response_id: str, body: dict[str, Any], status: str,
                  output: list[dict[str, Any]]) -> dict[str, Any]:
        done = status == "completed"
        return {
            "id": response_id, "object": "response", "created_at": int(time.time()), "status": status,
            "background": bool(body.get("background")), "error": None, "incomplete_details": None,
            "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "model": str(body.get("model", "")), "output": output, "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"), "reasoning": body.get("reasoning"),
            "store": body.get("store", True), "temperature": 1.0, "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools", []), "top_p": 1.0,
            "truncation": "disabled", "metadata": {},
            "usage": {
                "input_tokens": self.input_tokens, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": self.output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": self.input_tokens + self.output_tokens,
            } if done else None,
        }

    def stream_events(self, reply: TextReply | ToolCallsReply, body: dict[str, Any],
                      encrypted: bool) -> Iterator[Event]:
        """The events the Responses API streams for ``reply``, in order, numbered."""
        response_id = self.new_id("resp_fake")
        numbered = _Numbered()
        yield numbered({"type": "response.created", "response": self._response(response_id, body, "in_progress", [])})
        yield numbered({"type": "response.in_progress",
                        "response": self._response(response_id, body, "in_progress", [])})
        items: list[dict[str, Any]] = []
        if reply.reasoning:
            yield from self._reasoning(numbered, items, reply.reasoning, encrypted)
        if isinstance(reply, TextReply):
            yield from self._message(numbered, items, reply.pieces)
        else:
            for call in reply.calls:
                yield from self._function_call(numbered, items, call.name, call.id, call.argument_pieces())
        yield numbered({"type": "response.completed",
                        "response": self._response(response_id, body, "completed", items)})

    def _reasoning(self, numbered: "_Numbered", items: list[dict[str, Any]], pieces: Any,
                   encrypted: bool) -> Iterator[Event]:
        index, item_id, text = len(items), self.new_id("rs_fake"), "".join(pieces)
        where = {"item_id": item_id, "output_index": index, "summary_index": 0}
        yield numbered({"type": "response.output_item.added", "output_index": index,
                        "item": {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": None}})
        yield numbered({"type": "response.reasoning_summary_part.added", **where,
                        "part": {"type": "summary_text", "text": ""}})
        for piece in pieces:
            yield numbered({"type": "response.reasoning_summary_text.delta", **where, "delta": piece})
        yield numbered({"type": "response.reasoning_summary_text.done", **where, "text": text})
        yield numbered({"type": "response.reasoning_summary_part.done", **where,
                        "part": {"type": "summary_text", "text": text}})
        item = {"type": "reasoning", "id": item_id, "summary": [{"type": "summary_text", "text": text}],
                "encrypted_content": encrypted_of(text) if encrypted else None}
        items.append(item)
        yield numbered({"type": "response.output_item.done", "output_index": index, "item": item})

    def _message(self, numbered: "_Numbered", items: list[dict[str, Any]], pieces: Any) -> Iterator[Event]:
        index, item_id, text = len(items), self.new_id("msg_fake"), "".join(pieces)
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        yield numbered({"type": "response.output_item.added", "output_index": index, "item": {
            "type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []}})
        yield numbered({"type": "response.content_part.added", **where,
                        "part": {"type": "output_text", "text": "", "annotations": []}})
        for piece in pieces:
            yield numbered({"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []})
        part = {"type": "output_text", "text": text, "annotations": []}
        yield numbered({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
        yield numbered({"type": "response.content_part.done", **where, "part": part})
        item = {"type": "message", "id": item_id, "status": "completed", "role": "assistant", "content": [part]}
        items.append(item)
        yield numbered({"type": "response.output_item.done", "output_index": index, "item": item})

    def _function_call(self, numbered: "_Numbered", items: list[dict[str, Any]], name: str, call_id: str,
                       pieces: list[str]) -> Iterator[Event]:
        index, item_id, arguments = len(items), self.new_id("fc_fake"), "".join(pieces)
        item = {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": "",
                "status": "in_progress"}
        yield numbered({"type": "response.output_item.added", "output_index": index, "item": item})
        for piece in pieces:
            yield numbered({"type": "response.function_call_arguments.delta", "item_id": item_id,
                            "output_index": index, "delta": piece})
        yield numbered({"type": "response.function_call_arguments.done", "item_id": item_id,
                        "output_index": index, "arguments": arguments})
        done = {**item, "arguments": arguments, "status": "completed"}
        items.append(done)
        yield numbered({"type": "response.output_item.done", "output_index": index, "item": done})


class _Numbered:
    """Stamps each event with the stream's next ``sequence_number``."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, event: dict[str, Any]) -> Event:
        event["sequence_number"] = self.next
        self.next += 1
        return None, event
