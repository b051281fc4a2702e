"""A scripted Anthropic Messages server on 127.0.0.1, for testing provider code for real.

The ``anthropic`` SDK (through pydantic-ai's ``AnthropicModel``) talks to it as to
api.anthropic.com: ``POST /v1/messages``, answered for ``"stream": true`` with Anthropic's named
server-sent events (the SDK skips events without an ``event:`` line)::

    event: message_start        {"type":"message_start","message":{"id":"msg_…","content":[],"usage":{…}}}
    event: ping                 {"type":"ping"}
    event: content_block_start  {"type":"content_block_start","index":0,"content_block":{"type":"thinking",…}}
    event: content_block_delta  {… "delta":{"type":"thinking_delta","thinking":"…"}}
    event: content_block_delta  {… "delta":{"type":"signature_delta","signature":"…"}}
    event: content_block_stop   {"type":"content_block_stop","index":0}
    … a text block (text_delta), or tool_use blocks (input_json_delta with partial_json) …
    event: message_delta        {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{…}}
    event: message_stop         {"type":"message_stop"}

and for an in-band failure ``event: error`` with ``{"type":"error","error":{"type":"overloaded_error",
…}}``. HTTP errors carry the same ``{"type":"error","error":{type, message}}`` body. The shapes follow
Anthropic's streaming reference and the SDK's ``RawMessageStreamEvent`` types.

A thinking block's signature is ``signature_of(thinking)``: tests check that the next request sends
the block back with the very signature it was given.
"""

import hashlib
import json
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

MESSAGES_PATH = "/v1/messages"
STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}

Event = tuple[str, dict[str, Any]]


def signature_of(thinking: str) -> str:
    """The opaque signature the server gives a thinking block (deterministic, so tests can expect it)."""
    return "sig_" + hashlib.sha256(thinking.encode()).hexdigest()[:32]


class FakeAnthropicServer(ScriptedServer):
    """A real HTTP server speaking Anthropic's Messages API, answering from a script."""

    name = "fake-anthropic"
    post_paths = (MESSAGES_PATH,)

    @property
    def base_url(self) -> str:
        """What an Anthropic client takes as ``base_url`` (the SDK adds ``/v1/messages``)."""
        return self.url

    def error_body(self, reply: ErrorReply | StreamErrorReply) -> dict[str, Any]:
        error_type = "api_error" if reply.type == "server_error" else reply.type
        return {"type": "error", "error": {"type": error_type, "message": reply.message},
                "request_id": "req_fake"}

    def is_piece(self, data: dict[str, Any] | str) -> bool:
        return isinstance(data, dict) and data.get("type") == "content_block_delta" and (
            data["delta"]["type"] != "signature_delta")

    def answer(self, handler: _Handler, request: RecordedRequest) -> None:
        model = str(request.body.get("model", ""))
        reply = self.next_reply()
        if isinstance(reply, ErrorReply):
            handler.send_error_reply(reply)
        elif not request.stream:
            if isinstance(reply, StreamErrorReply | CutReply):
                handler.send_error_reply(ErrorReply(500, getattr(reply, "message", "stream cut")))
            else:
                handler.send_json(200, self.message(reply, model))
        elif isinstance(reply, StreamErrorReply | CutReply):
            handler.start_stream()
            events = list(self.stream_events(TextReply(reply.pieces), model))
            handler.write_events(events[:-3])  # up to the text block's last delta
            if isinstance(reply, CutReply):
                handler.cut_stream()
            handler.write_event(self.error_body(reply), "error")
            handler.end_stream()
        else:
            handler.start_stream()
            handler.write_events(self.stream_events(reply, model))
            handler.end_stream()

    # --- wire format ----------------------------------------------------------------------------
    def _usage(self, output_tokens: int) -> dict[str, Any]:
        return {"input_tokens": self.input_tokens, "output_tokens": output_tokens,
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}

    def content(self, reply: TextReply | ToolCallsReply) -> list[dict[str, Any]]:
        """The message's content blocks, as the non-streamed message (and ``message_stop``'s sum) has them."""
        blocks: list[dict[str, Any]] = []
        if reply.reasoning:
            thinking = "".join(reply.reasoning)
            blocks.append({"type": "thinking", "thinking": thinking, "signature": signature_of(thinking)})
        if isinstance(reply, TextReply):
            blocks.append({"type": "text", "text": reply.text, "citations": None})
        else:
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
                       for c in reply.calls]
        return blocks

    def message(self, reply: TextReply | ToolCallsReply, model: str) -> dict[str, Any]:
        """The non-streamed ``message`` object for ``reply``."""
        return {
            "id": self.new_id("msg_fake"), "type": "message", "role": "assistant", "model": model,
            "content": self.content(reply), "stop_reason": STOP_REASONS.get(reply.finish_reason, "end_turn"),
            "stop_sequence": None, "usage": self._usage(self.output_tokens),
        }

    def stream_events(self, reply: TextReply | ToolCallsReply, model: str) -> Iterator[Event]:
        """The named events Anthropic streams for ``reply``, in order."""
        start = {**self.message(reply, model), "content": [], "stop_reason": None, "usage": self._usage(1)}
        yield "message_start", {"type": "message_start", "message": start}
        yield "ping", {"type": "ping"}
        index = 0
        if reply.reasoning:
            yield from _block(index, {"type": "thinking", "thinking": "", "signature": ""},
                              [{"type": "thinking_delta", "thinking": piece} for piece in reply.reasoning]
                              + [{"type": "signature_delta", "signature": signature_of("".join(reply.reasoning))}])
            index += 1
        if isinstance(reply, TextReply):
            yield from _block(index, {"type": "text", "text": ""},
                              [{"type": "text_delta", "text": piece} for piece in reply.pieces])
        else:
            for offset, call in enumerate(reply.calls):
                yield from _block(index + offset, {"type": "tool_use", "id": call.id, "name": call.name, "input": {}},
                                  [{"type": "input_json_delta", "partial_json": piece}
                                   for piece in call.argument_pieces()])
        yield "message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": STOP_REASONS.get(reply.finish_reason, "end_turn"), "stop_sequence": None},
            "usage": {"output_tokens": self.output_tokens},
        }
        yield "message_stop", {"type": "message_stop"}


def _block(index: int, opening: dict[str, Any], deltas: list[dict[str, Any]]) -> Iterator[Event]:
    yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": opening}
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}
