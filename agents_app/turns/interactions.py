"""The user's answers to a reply: client tool results and approvals, and what follows.

An answer is matched against the stored reply, never against the client's copy: the tool call
must exist in the transcript, be waiting for this kind of answer, and (for results) belong to a
client tool. Applying it updates the part in one transaction, tells every connection
(``cf_agent_message_updated``) and, with ``autoContinue``, queues one continuation turn.
See docs/protocol.md#tool-results-and-approvals.
"""

import asyncio
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction

from .. import events, registry, transcript
from ..agent import ChatAgent
from ..messages import new_request_id, tool_approval_update, tool_name, tool_result_update
from ..models import AgentInstance, ChatMessage, Turn
from ..protocol import frames
from ..protocol.parse import ProtocolError, ToolApproval, ToolResult
from ..streaming import fanout
from ..tools import ClientTool
from . import lock
from .engine import start_drain

# Auto-continuations wait this long (seconds) so answers sent together run as one turn.
COALESCE_SECONDS = 0.05
# How long an answer waits for the reply it answers to be stored (it is stored at turn end).
FIND_TIMEOUT_SECONDS = 2.0


class _Unchanged(Exception):
    """The same answer again: a no-op, reported to nobody."""


async def apply_tool_result(instance: AgentInstance, event: ToolResult, origin_channel: str) -> None:
    """``cf_agent_tool_result``: store the browser's output of a client tool call.

    Raises:
        ProtocolError: unknown call, not a client tool, or a call that is not waiting for a result.
    """
    events.emit_chat(instance, events.TOOL_RESULT, toolCallId=event.tool_call_id, toolName=event.tool_name)
    if event.client_tools:
        await database_sync_to_async(_store_client_tools)(instance, event.client_tools)

    def update(part: dict[str, Any], client_tools: set[str]) -> dict[str, Any] | None:
        # A result answers a client tool, or rejects a call awaiting approval with a custom error.
        if tool_name(part) not in client_tools and part.get("state") != "approval-requested":
            raise ProtocolError(f"Tool call {event.tool_call_id} is not a client tool call", code="not_client_tool")
        if part.get("state") == event.state and part.get("output") == event.output and (
            part.get("errorText") == event.error_text or event.state == "output-available"
        ):
            raise _Unchanged
        return tool_result_update(part, event.output, state=event.state, error_text=event.error_text)

    await _apply(instance, event.tool_call_id, update, "a result", event.auto_continue, origin_channel)


async def apply_tool_approval(instance: AgentInstance, event: ToolApproval, origin_channel: str) -> None:
    """``cf_agent_tool_approval``: Approve (→ ``approval-responded``) or Reject (→ ``output-denied``).

    Raises:
        ProtocolError: unknown call, or a call that is not waiting for approval.
    """

    events.emit_chat(instance, events.TOOL_APPROVAL, toolCallId=event.tool_call_id, approved=event.approved)
    # An action's approval request carries its descriptor: deciding it is ``action:approval-resolved``.
    decided: dict[str, Any] = {}

    def update(part: dict[str, Any], client_tools: set[str]) -> dict[str, Any] | None:
        approval = part.get("approval") or {}
        if approval.get("approved") is event.approved and part.get("state") in ("approval-responded", "output-denied"):
            raise _Unchanged
        decided.update(approval.get("descriptor") or {})
        return tool_approval_update(part, event.approved)

    await _apply(instance, event.tool_call_id, update, "an approval", event.auto_continue, origin_channel)
    if decided:
        events.emit(events.ACTION_APPROVAL_RESOLVED, action=decided.get("action"), requestId=decided.get("requestId"),
                    toolCallId=event.tool_call_id, approved=event.approved)


async def _apply(instance: AgentInstance, tool_call_id: str, update: Any, what: str, auto_continue: bool,
                 origin_channel: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FIND_TIMEOUT_SECONDS
    while True:
        try:
            message, continuation = await database_sync_to_async(_apply_stored)(
                instance, tool_call_id, update, what, origin_channel if auto_continue else None)
            break
        except LookupError:
            # The reply is stored when its turn ends; an answer may arrive just before that.
            if loop.time() >= deadline or not await _turn_active(instance):
                raise ProtocolError(f"No tool call {tool_call_id} in this conversation", code="unknown_tool_call") \
                    from None
            await asyncio.sleep(0.05)
        except _Unchanged:
            return
    await fanout.publish(instance.pk, frames.message_updated(message))
    if continuation is not None:
        start_drain(instance.pk, delay=COALESCE_SECONDS)


def _apply_stored(instance: AgentInstance, tool_call_id: str, update: Any, what: str, continue_for: str | None
                  ) -> tuple[dict[str, Any], Turn | None]:
    """Update the stored part (``transcript.update_tool_part``), and with ``continue_for`` (the
    answering channel) queue the continuation in the same transaction, so that nobody sees the
    call answered and no turn coming (``wait_until_stable``, a client's resume probe, which is
    told to keep waiting until the continuation streams). Answers arriving together share one
    continuation (``enqueue_continuation``). LookupError if there is no such part."""
    with transaction.atomic():
        message = _update_part(instance, tool_call_id, update, what)
        return message, enqueue_continuation(instance, continue_for) if continue_for is not None else None


def _update_part(instance: AgentInstance, tool_call_id: str, update: Any, what: str) -> dict[str, Any]:
    agent = registry.agent_for(instance)
    client_tools = _client_tool_names(instance, agent)

    def answered(part: dict[str, Any]) -> dict[str, Any]:
        updated = update(part, client_tools)
        if updated is None:
            raise ProtocolError(
                f"Tool call {tool_call_id} is {part.get('state')}, not waiting for {what}",
                code="tool_call_not_waiting",
            )
        return updated

    message = transcript.update_tool_part(instance, lambda part: part.get("toolCallId") == tool_call_id, answered,
                                          policy=transcript.Policy.of(agent))
    if message is None:
        raise LookupError(tool_call_id)
    return message


def _client_tool_names(instance: AgentInstance, agent: ChatAgent) -> set[str]:
    _, stored = transcript.request_context(instance)
    declared = {t.name for t in agent.get_tools() if isinstance(t, ClientTool)}
    return declared | {t["name"] for t in stored or []}


def _store_client_tools(instance: AgentInstance, client_tools: list[dict[str, Any]]) -> None:
    body, _ = transcript.request_context(instance)
    transcript.store_request_context(instance, body, client_tools)


async def _turn_active(instance: AgentInstance) -> bool:
    return await Turn.objects.of(instance).active().aexists()


def enqueue_continuation(instance: AgentInstance, origin_channel: str = "") -> Turn | None:
    """The continuation turn's row, or None when one is already queued (it serves both answers).

    It continues the last reply, or starts a new one when the transcript ends otherwise (a system
    note of a staff decision: the outcome of a call no longer stored, or one that names a call in
    an earlier message; the engine marks that reply with the note's ``continuationOf``). Agents
    see either as a continuation. It acts for whoever asked last, so
    ``authorize_turn`` grants the same permissions as in the turn that asked for the tool.
    """
    with transaction.atomic():
        generation = lock.for_new_turn(instance.pk)
        if Turn.objects.of(instance).queued().filter(kind=Turn.Kind.CONTINUATION).exists():
            return None
        body, client_tools = transcript.request_context(instance)
        last_role = ChatMessage.objects.filter(instance=instance).order_by("-position").values_list(
            "role", flat=True).first()
        asker = Turn.objects.of(instance).filter(user__isnull=False).order_by("-pk").values_list(
            "user_id", flat=True).first()
        return Turn.objects.create(
            instance=instance, request_id=new_request_id(), kind=Turn.Kind.CONTINUATION,
            continuation=last_role == "assistant", generation=generation, origin_channel=origin_channel,
            body=body, client_tools=client_tools, user_id=asker,
        )
