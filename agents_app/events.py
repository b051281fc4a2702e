"""Observability events: the reference's event names, emitted to the log and to in-process subscribers.

The constants here are the whole vocabulary (docs/architecture.md#events): the action events the
reference's code emits and those its actions design lists, and the chat events of
``AIChatAgent`` (``message:*``, ``tool:*``) and Think (``chat:turn:*``, ``chat:request:failed``).
Payload keys are the reference's (``inputHash``, ``ageMs``, ``executionId``…), so a dashboard reads
the same fields as on Cloudflare. Tests assert on names and payloads, never on log text. A
subscriber runs synchronously inside ``emit()``; one that raises is logged and skipped, because
observability must never change what the caller does. A subscriber may ask for one of the
reference's channels or a name prefix instead of everything.
"""

import logging
import threading
from collections.abc import Callable
from typing import Any, Final, overload

__all__ = [
    "ACTION_APPROVAL_REQUESTED",
    "ACTION_APPROVAL_RESOLVED",
    "ACTION_AUTHORIZED",
    "ACTION_DENIED",
    "ACTION_ERROR",
    "ACTION_INVOKED",
    "ACTION_REPLAYED",
    "ACTION_SETTLED",
    "ACTION_TIMED_OUT",
    "CHANNELS",
    "LEDGER_CONFLICT",
    "LEDGER_PENDING",
    "LEDGER_RECLAIMED",
    "LEDGER_REPLAYED",
    "LEDGER_SERIALIZE_FAILED",
    "LEDGER_SETTLED",
    "LEDGER_SWEPT",
    "MCP_CLOSE",
    "MCP_CONNECT",
    "MCP_DISCOVER",
    "MCP_PRECONNECT",
    "MCP_WAIT",
    "MESSAGE_CANCEL",
    "MESSAGE_CLEAR",
    "MESSAGE_ERROR",
    "MESSAGE_REQUEST",
    "MESSAGE_RESPONSE",
    "PAUSE_APPROVED",
    "PAUSE_CREATED",
    "PAUSE_REJECTED",
    "PAUSE_SWEPT",
    "RECOVERY_ATTEMPT",
    "RECOVERY_COMPLETED",
    "RECOVERY_DETECTED",
    "RECOVERY_EXHAUSTED",
    "RECOVERY_FAILED",
    "RECOVERY_SCHEDULED",
    "RECOVERY_SKIPPED",
    "REPLY_ATTACHED",
    "REQUEST_FAILED",
    "SCHEDULE_CANCEL",
    "SCHEDULE_CREATE",
    "SCHEDULE_ERROR",
    "SCHEDULE_EXECUTE",
    "TOOL_APPROVAL",
    "TOOL_RESULT",
    "TURN_FINISH",
    "TURN_START",
    "Subscriber",
    "channel_of",
    "emit",
    "emit_chat",
    "subscribe",
]

logger = logging.getLogger("agents_app.events")

# Action ledger (§5.9). Payload {action, key, inputHash} unless noted.
LEDGER_REPLAYED = "action:ledger:replayed"
LEDGER_PENDING = "action:ledger:pending"
LEDGER_CONFLICT = "action:ledger:conflict"
LEDGER_SETTLED = "action:ledger:settled"
# {action, key, inputHash, ageMs}
LEDGER_RECLAIMED = "action:ledger:reclaimed"
# {action, key}
LEDGER_SERIALIZE_FAILED = "action:ledger:serialize_failed"
# {settled, pending}
LEDGER_SWEPT = "action:ledger:swept"

# Durable-pause actions (§5.10).
# {action, executionId, toolCallId}
PAUSE_CREATED = "action:pause:created"
# {action, executionId}
PAUSE_APPROVED = "action:pause:approved"
# {action, executionId}
PAUSE_REJECTED = "action:pause:rejected"
# {swept}, only when something was swept
PAUSE_SWEPT = "action:pause:swept"

# Reply attachments (§5.12). {action?, attachmentType}
REPLY_ATTACHED = "action:reply-attached"

# An action call's life, as the reference's actions design lists it (its code does not emit them;
# docs/architecture.md#action-events). Every payload has {action, requestId, toolCallId}, plus:
# {kind}
ACTION_INVOKED = "action:invoked"
# {required, granted} (granted None: the turn grants everything); denied adds {reason}
ACTION_AUTHORIZED = "action:authorized"
ACTION_DENIED = "action:denied"
# {kind} (approval-gated: the user is asked; durable-pause: the call parked for staff)
ACTION_APPROVAL_REQUESTED = "action:approval-requested"
# {approved}
ACTION_APPROVAL_RESOLVED = "action:approval-resolved"
# execute returned: {durationMs, truncated}
ACTION_SETTLED = "action:settled"
# The ledger answered with a stored result: {from: "ledger"}
ACTION_REPLAYED = "action:replayed"
# execute passed its timeout / raised: {name, message} (the error envelope's)
ACTION_TIMED_OUT = "action:timed-out"
ACTION_ERROR = "action:error"

# Chat (§4.8). Every payload also names the conversation: {agent: <slug>, name: <instance name>},
# as Cloudflare puts them beside the payload.
# A chat request's turn starts its model call; then it finished without error. {requestId}
MESSAGE_REQUEST = "message:request"
MESSAGE_RESPONSE = "message:response"
# A turn failed (in-band stream error, or the agent raised). {requestId, error}
MESSAGE_ERROR = "message:error"
# {} (the transcript was cleared)
MESSAGE_CLEAR = "message:clear"
# {requestId} (a client asked to cancel that turn)
MESSAGE_CANCEL = "message:cancel"
# A client tool's result / a user's approval decision was applied. {toolCallId, toolName} / {toolCallId, approved}
TOOL_RESULT = "tool:result"
TOOL_APPROVAL = "tool:approval"
# Every turn that runs. {requestId, trigger, continuation, generation}; finish adds {status, durationMs}.
TURN_START = "chat:turn:start"
TURN_FINISH = "chat:turn:finish"
# A chat request did not get its reply. {requestId, stage: parse|persist|turn|stream, messagesPersisted, error}
REQUEST_FAILED = "chat:request:failed"

# Schedules (the reference Agent's ``schedule:*`` events). Payloads name the conversation too
# ({agent, name}). A schedule was added / removed: {id, callback} (callback: "prompt", "handler"
# or the agent method's name).
SCHEDULE_CREATE = "schedule:create"
SCHEDULE_CANCEL = "schedule:cancel"
# A run started: {id, callback, occurrenceKey, requestId}.
SCHEDULE_EXECUTE = "schedule:execute"
# A run failed (its turn erred, its handler raised, its agent is gone): {id, callback,
# occurrenceKey, requestId, status, error}.
SCHEDULE_ERROR = "schedule:error"

# Durable chat recovery: a cut turn was found, an attempt queued, an attempt began,
# the incident ended well, was skipped (parked on the user, or ``continue: False``), failed
# (``on_chat_recovery`` raised), or was given up.
RECOVERY_DETECTED = "chat:recovery:detected"
RECOVERY_SCHEDULED = "chat:recovery:scheduled"
RECOVERY_ATTEMPT = "chat:recovery:attempt"
RECOVERY_COMPLETED = "chat:recovery:completed"
RECOVERY_SKIPPED = "chat:recovery:skipped"
RECOVERY_FAILED = "chat:recovery:failed"
RECOVERY_EXHAUSTED = "chat:recovery:exhausted"

# MCP connections (the reference's ``mcp:client:*`` events), per process. A connection starts
# {serverId, instance}; it is ready or failed {serverId, url, transport, state, error?}; what it
# offers was listed {serverId, url, state, tools}; it closed (idle, removed, changed) {serverId, url, state}.
MCP_PRECONNECT = "mcp:client:preconnect"
MCP_CONNECT = "mcp:client:connect"
MCP_DISCOVER = "mcp:client:discover"
MCP_CLOSE = "mcp:client:close"
# Ours: a turn waited for its MCP connections (``wait_for_mcp_connections``). {requestId, timeout
# (seconds, None: no limit), pending: the servers still connecting when it stopped waiting}
MCP_WAIT = "chat:mcp:wait"

Subscriber = Callable[[str, dict[str, Any]], object]

# The reference's observability channels, and the event-name prefixes each carries (the first
# match wins, so ``chat:transcript:`` goes to ``transcript`` before ``chat:`` takes the rest).
# ``subscribe("chat", fn)`` gets the events of one channel (docs/architecture.md#events).
_ROUTES: tuple[tuple[str, str], ...] = (
    ("mcp:", "mcp"), ("workflow:", "workflow"), ("fiber:", "fiber"), ("transcript:", "transcript"),
    ("chat:transcript:", "transcript"), ("chat:", "chat"), ("agent_tool:", "agentTool"), ("schedule:", "schedule"),
    ("queue:", "schedule"), ("message:", "message"), ("tool:", "message"), ("submission:", "message"),
    ("action:", "message"), ("rpc:", "rpc"), ("state:", "state"), ("email:", "email"), ("channel:", "channel"),
    ("notice:", "channel"),
)
CHANNELS: Final[tuple[str, ...]] = (
    "state", "rpc", "message", "chat", "transcript", "fiber", "agentTool", "schedule", "lifecycle", "workflow", "mcp",
    "email", "channel",
)

# (channel or name prefix or None for all, callback); None is the catch-all.
_subscribers: list[tuple[str | None, Subscriber]] = []
# emit() may run in several threads at once (sync_to_async workers, Celery threads).
_lock = threading.Lock()


def channel_of(name: str) -> str:
    """The reference's channel of event ``name`` (``lifecycle`` for connect, disconnect, destroy...)."""
    if name == "rpc":
        return "rpc"
    return next((channel for prefix, channel in _ROUTES if name.startswith(prefix)), "lifecycle")


@overload
def subscribe(callback: Subscriber, /) -> Callable[[], None]: ...


@overload
def subscribe(selector: str, callback: Subscriber, /) -> Callable[[], None]: ...


def subscribe(selector: str | Subscriber, callback: Subscriber | None = None, /) -> Callable[[], None]:
    """Call ``callback(name, data)`` on events; returns a function that unsubscribes it.

    ``subscribe(fn)``: every event. ``subscribe("chat", fn)``: the events of one of the
    reference's channels (``CHANNELS``; ``channel_of`` says which). ``subscribe("action:", fn)``:
    the events whose name starts with that prefix (anything that is not a channel is a prefix).
    Unsubscribing twice is harmless, so a test fixture can always call it in its teardown.
    """
    if callback is None:
        if not callable(selector):
            raise TypeError("subscribe(fn) or subscribe(channel_or_prefix, fn)")
        entry: tuple[str | None, Subscriber] = (None, selector)
    elif isinstance(selector, str) and selector and callable(callback):
        entry = (selector, callback)
    else:
        raise TypeError("subscribe(channel_or_prefix, fn) takes a non-empty string and a callable")
    with _lock:
        _subscribers.append(entry)

    def unsubscribe() -> None:
        with _lock:
            if entry in _subscribers:
                _subscribers.remove(entry)

    return unsubscribe


def _wants(selector: str | None, name: str) -> bool:
    if selector is None:
        return True
    return channel_of(name) == selector if selector in CHANNELS else name.startswith(selector)


def emit_chat(instance: Any, name: str, /, **data: Any) -> None:
    """Chat event ``name`` of an agent instance: the payload names its agent (slug) and instance."""
    emit(name, agent=instance.slug, name=instance.name, **data)


def emit(name: str, /, **data: Any) -> None:
    """Log event ``name`` at INFO on ``agents_app.events`` and hand it to every subscriber.

    Subscribers get their own copy of ``data``; an exception in one is logged, never raised.
    """
    logger.info("%s %s", name, data, extra={"event": name, "event_data": data})
    with _lock:
        subscribers = [callback for selector, callback in _subscribers if _wants(selector, name)]
    for callback in subscribers:
        try:
            callback(name, dict(data))
        except Exception:  # a broken observer must not break the action it observes
            logger.exception("event subscriber %r failed on %s", callback, name)
