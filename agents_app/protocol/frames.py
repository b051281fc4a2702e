"""Builders for every outbound frame: the only place wire dicts are made.

Key order follows the frames captured from the real ``AIChatAgent`` (docs/protocol.md#scope-and-conventions):
response frames are ``body, done, id, type`` then the optional flags. Golden tests freeze these
shapes; an intended wire change edits a fixture on purpose.
"""

from typing import Any

from . import codec
from .types import MessageType, Outcome, StreamResumeNoneReason

Frame = dict[str, Any]


def encode(frame: Frame) -> str:
    """Serialise a frame for the socket (compact separators, as the reference server sends)."""
    return codec.dumps(frame)


def identity(*, name: str, agent: str) -> Frame:
    return {"type": MessageType.IDENTITY.value, "name": name, "agent": agent}


def mcp_servers(state: dict[str, Any] | None = None) -> Frame:
    """The instance's MCP servers, tools, prompts and resources (docs/protocol.md#mcp-servers-frame);
    without ``state``, the empty structure of an instance with none."""
    return {
        "mcp": state if state is not None else {"prompts": [], "resources": [], "servers": {}, "tools": []},
        "type": MessageType.MCP_SERVERS.value,
    }


def chunk(
    *,
    request_id: str,
    body: str,
    seq: int,
    continuation: bool = False,
    replay: bool = False,
) -> Frame:
    """One UIMessageChunk (already JSON-encoded in ``body``) of a streamed reply."""
    frame: Frame = {
        "body": body,
        "done": False,
        "id": request_id,
        "type": MessageType.USE_CHAT_RESPONSE.value,
    }
    if replay:
        frame["replay"] = True
    frame["seq"] = seq
    if continuation:
        frame["continuation"] = True
    return frame


def done(
    *,
    request_id: str,
    message_ids: list[str] | None = None,
    outcome: Outcome | None = None,
    continuation: bool = False,
    replay: bool = False,
    body: str = "",
) -> Frame:
    """The terminal frame of a reply. ``outcome`` is omitted for a plain completion."""
    frame: Frame = {
        "body": body,
        "done": True,
        "id": request_id,
        "type": MessageType.USE_CHAT_RESPONSE.value,
    }
    if replay:
        frame["replay"] = True
    if continuation:
        frame["continuation"] = True
    if outcome is not None:
        frame["outcome"] = outcome.value
    if message_ids is not None:
        frame["messageIds"] = message_ids
    return frame


def stream_error(*, request_id: str, error_text: str, continuation: bool = False) -> Frame:
    """An in-band model error: ``error:true`` with the text, followed later by a done frame."""
    frame: Frame = {
        "body": error_text,
        "done": False,
        "id": request_id,
        "type": MessageType.USE_CHAT_RESPONSE.value,
        "error": True,
    }
    if continuation:
        frame["continuation"] = True
    return frame


def thrown_error(*, request_id: str, error_text: str, continuation: bool = False) -> Frame:
    """A turn that failed outside the stream: one terminal frame carrying the error text."""
    frame = done(request_id=request_id, body=error_text, continuation=continuation)
    frame["error"] = True
    return frame


def replay_complete(*, request_id: str, continuation: bool = False) -> Frame:
    """End of a replay whose stream is still live (docs/protocol.md#replay)."""
    frame: Frame = {
        "body": "",
        "done": False,
        "id": request_id,
        "type": MessageType.USE_CHAT_RESPONSE.value,
        "replay": True,
        "replayComplete": True,
    }
    if continuation:
        frame["continuation"] = True
    return frame


def chat_messages(messages: list[Any]) -> Frame:
    """The transcript: its messages, or their stored JSON texts (``codec.embedded``)."""
    return {"messages": messages, "type": MessageType.CHAT_MESSAGES.value}


def chat_recovering(*, recovering: bool, request_id: str | None = None) -> Frame:
    """Sets or clears the client's ``isRecovering`` (an incident opened, or ended)."""
    frame: Frame = {"type": MessageType.CHAT_RECOVERING.value, "recovering": recovering}
    if request_id:
        frame["id"] = request_id
    return frame


def chat_clear() -> Frame:
    return {"type": MessageType.CHAT_CLEAR.value}


def message_updated(message: dict[str, Any]) -> Frame:
    return {"type": MessageType.MESSAGE_UPDATED.value, "message": message}


def stream_resuming(*, request_id: str, probe_id: str | None = None) -> Frame:
    frame: Frame = {"type": MessageType.STREAM_RESUMING.value, "id": request_id}
    if probe_id is not None:
        frame["probeId"] = probe_id
    return frame


def stream_resume_none(
    *, reason: StreamResumeNoneReason = StreamResumeNoneReason.IDLE, probe_id: str | None = None
) -> Frame:
    frame: Frame = {"type": MessageType.STREAM_RESUME_NONE.value, "reason": reason.value}
    if probe_id is not None:
        frame["probeId"] = probe_id
    return frame


def stream_pending(*, request_id: str | None = None, probe_id: str | None = None) -> Frame:
    frame: Frame = {"type": MessageType.STREAM_PENDING.value}
    if request_id is not None:
        frame["id"] = request_id
    if probe_id is not None:
        frame["probeId"] = probe_id
    return frame


def error(*, message: str, code: str, request_id: str | None = None) -> Frame:
    """Our error frame for bad client input. The real client ignores unknown types."""
    frame: Frame = {"type": MessageType.ERROR.value, "code": code, "error": message}
    if request_id is not None:
        frame["id"] = request_id
    return frame


def rpc_result(*, call_id: str, result: Any) -> Frame:
    """The answer to an RPC call that returned ``result`` (JSON)."""
    return {"done": True, "id": call_id, "result": result, "success": True, "type": MessageType.RPC.value}


def rpc_error(*, call_id: str | None, error: str) -> Frame:
    """The answer to an RPC call that failed: ``Method X does not exist``, ``… is not callable``, or its error."""
    return {"error": error, "id": call_id, "success": False, "type": MessageType.RPC.value}
