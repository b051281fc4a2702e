"""Helpers to drive the protocol in tests: request frames, reading until done, id normalising."""

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

RESP = "cf_agent_use_chat_response"


def user_message(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def chat_request(request_id: Any, messages: list[dict[str, Any]] | None = None, trigger: str = "submit-message", *,
                 body: Any = None, raw_body: Any = None, init: Any = None, **custom: Any) -> dict[str, Any]:
    """A ``cf_agent_use_chat_request`` frame as useAgentChat sends it (``custom``: more body fields).

    For malformed frames: ``body`` replaces the whole body, ``raw_body`` its JSON text, ``init`` the
    whole request init; a ``request_id`` of None leaves the id out.
    """
    if init is None:
        if raw_body is None:
            raw_body = json.dumps({"messages": messages or [], "trigger": trigger, **custom} if body is None else body)
        init = {"method": "POST", "body": raw_body}
    frame = {"type": "cf_agent_use_chat_request", "id": request_id, "init": init}
    if request_id is None:
        del frame["id"]
    return frame


async def receive_until(communicator: WebsocketCommunicator, predicate: Any,
                        timeout: float = 5) -> list[dict[str, Any]]:
    """Frames received up to and including the first one matching ``predicate``."""
    received = []
    while True:
        frame = await communicator.receive_json_from(timeout=timeout)
        received.append(frame)
        if predicate(frame):
            return received


async def open_agent(ws: Any, path: str) -> WebsocketCommunicator:
    """A connection from the ``ws`` fixture with its connect frames (identity, MCP servers) read."""
    a = await ws(path)
    assert (await a.receive_json_from())["type"] == "cf_agent_identity"
    assert (await a.receive_json_from())["type"] == "cf_agent_mcp_servers"
    return a


async def follow_continuation(a: WebsocketCommunicator) -> list[dict[str, Any]]:
    """As useAgentChat does after answering: probe, wait (pending), ACK the continuation, read it.

    A short continuation may end between the server's ``resuming`` and its reading of the ACK.
    The connection then gets the final transcript and a done frame without the stream: the end
    releases it (its live done; the ACK then gets only an empty replayed done), or the ACK,
    read after the stream ended but before its end reached this connection, gets the stored
    transcript and the replayed done (``streaming.handshake``, as the reference does;
    docs/protocol.md#late-ack); the real client shows the final transcript. So that tests check the continuation's
    chunks however the race went, the chunks are then taken from the stream buffer the server
    replays from, and put where a timely ACK would have had them: before the final transcript.
    """
    await a.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p2"})
    frames = []
    acked = None
    while True:
        frame = await a.receive_json_from(timeout=5)
        frames.append(frame)
        if frame["type"] == "cf_agent_stream_resuming":
            acked = frame["id"]
            await a.send_json_to({"type": "cf_agent_stream_resume_ack", "id": frame["id"]})
        if frame.get("done"):
            break
    missed = acked is not None and not any(
        f.get("type") == RESP and f.get("id") == acked and f.get("body") and not f.get("done") for f in frames)
    if not missed:
        return frames
    if not frame.get("replay"):
        # Released by the end: the ACK's answer comes after it. Read it, so no later read gets it.
        late = await a.receive_json_from(timeout=5)
        assert (late.get("id"), late.get("done"), late.get("replay"), late.get("body")) == (acked, True, True, ""), late
    stored = await database_sync_to_async(_stored_chunks)(acked)
    end = max(i for i, f in enumerate(frames) if f["type"] == "cf_agent_chat_messages")
    return [*frames[:end], *stored, *frames[end:]]


def _stored_chunks(request_id: str) -> list[dict[str, Any]]:
    """A finished stream's chunks as live frames, from the buffer (``follow_continuation``)."""
    from agents_app.models import StreamRecord
    from agents_app.protocol import frames
    from agents_app.streaming import buffer

    stream = StreamRecord.objects.filter(request_id=request_id).last()
    assert stream is not None, f"no stream buffer for {request_id}"
    return [frames.chunk(request_id=request_id, body=body, seq=index, continuation=stream.continuation)
            for index, body in buffer.read(stream)]


def is_done(request_id: str) -> Any:
    return lambda f: f.get("type") == RESP and f.get("id") == request_id and f.get("done") is True


def chunks(received: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decoded chunk bodies of the response frames (error/done frames excluded)."""
    return [json.loads(f["body"]) for f in received
            if f.get("type") == RESP and f.get("body") and not f.get("done") and not f.get("error")]


def text_of(received: list[dict[str, Any]]) -> str:
    return "".join(c.get("delta", "") for c in chunks(received) if c["type"] == "text-delta")


def message_text(message: dict[str, Any]) -> str:
    """The text parts of a stored or sent ``UIMessage``, joined."""
    return "".join(p.get("text", "") for p in message["parts"] if p["type"] == "text")


def normalize(frames: list[dict[str, Any]], known: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Frames with server-made ids replaced by ``<id:n>`` in order of appearance (decoded bodies).

    Client-chosen ids (``u1``, ``r1``) stay as they are; ``known`` maps further literal values.
    """
    names: dict[str, str] = dict(known or {})

    def name(value: str) -> str:
        if value not in names:
            names[value] = f"<id:{len(names) + 1}>"
        return names[value]

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key) for v in value]
        if isinstance(value, str) and key in _SERVER_ID_KEYS and not _CLIENT_ID.match(value):
            return name(value)
        return value

    out = []
    for frame in frames:
        frame = dict(frame)
        if frame.get("type") == RESP and frame.get("body") and not frame.get("error"):
            frame["body"] = json.loads(frame["body"])
        out.append(walk(frame))
    return out


_SERVER_ID_KEYS = {"messageId", "id", "approvalId", "toolCallId", "executionId"}
_CLIENT_ID = __import__("re").compile(r"^(u|r|a|p|c|q|v|tc|dp)\d+$")
