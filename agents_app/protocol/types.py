"""Wire constants of the ``cf_agent_*`` protocol.

The strings are those of the reference's chat protocol and its base ``Agent``
(docs/protocol.md#frame-catalogue). Nothing here imports Django.
"""

from enum import IntEnum, StrEnum


class MessageType(StrEnum):
    """Every frame ``type`` the server sends or accepts."""

    CHAT_MESSAGES = "cf_agent_chat_messages"
    USE_CHAT_REQUEST = "cf_agent_use_chat_request"
    USE_CHAT_RESPONSE = "cf_agent_use_chat_response"
    CHAT_CLEAR = "cf_agent_chat_clear"
    CHAT_REQUEST_CANCEL = "cf_agent_chat_request_cancel"
    STREAM_RESUMING = "cf_agent_stream_resuming"
    STREAM_RESUME_ACK = "cf_agent_stream_resume_ack"
    STREAM_RESUME_REQUEST = "cf_agent_stream_resume_request"
    STREAM_RESUME_NONE = "cf_agent_stream_resume_none"
    STREAM_PENDING = "cf_agent_stream_pending"
    TOOL_RESULT = "cf_agent_tool_result"
    TOOL_APPROVAL = "cf_agent_tool_approval"
    MESSAGE_UPDATED = "cf_agent_message_updated"
    CHAT_RECOVERING = "cf_agent_chat_recovering"
    IDENTITY = "cf_agent_identity"
    STATE = "cf_agent_state"
    MCP_SERVERS = "cf_agent_mcp_servers"
    # A call of an agent method, and its answer (the base Agent's, docs/protocol.md#rpc-frames).
    RPC = "rpc"
    # Our own: a frame the real client ignores (unknown types fall through to onMessage).
    ERROR = "cf_agent_error"


class StreamResumeNoneReason(StrEnum):
    """Why a resume probe found nothing to resume (§2.7); only ``idle`` proves inactivity."""

    IDLE = "idle"
    CONTINUATION_OWNED = "continuation-owned"


class Outcome(StrEnum):
    """``outcome`` of a terminal response frame (docs/protocol.md#response-frames)."""

    COMPLETED = "completed"
    ERROR = "error"
    ABORTED = "aborted"
    SKIPPED = "skipped"
    # The turn was cut (a crash, a stalled stream); a recovery attempt carries on with it.
    RECOVERING = "recovering"


class CloseCode(IntEnum):
    """WebSocket close codes. 4000-4999 are terminal for PartySocket: the client stops retrying."""

    BAD_REQUEST = 4400
    UNAUTHENTICATED = 4401
    FORBIDDEN = 4403
    NOT_FOUND = 4404


SUBMIT_TRIGGER = "submit-message"
REGENERATE_TRIGGER = "regenerate-message"
