"""The persisted transcript of an agent instance (``ChatMessage`` rows).

Sync functions: callers in async code wrap them in ``database_sync_to_async``. Each write runs
in one transaction so a reader never sees half a transcript, and marks the instance changed
(``updated_at``, the order of the instance list) first: the instance row, then its messages, the
lock order of every writer.
"""

from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from .messages import UIMessage, is_tool_part
from .models import AgentInstance, ChatMessage, RequestContext


def load(instance: AgentInstance) -> list[UIMessage]:
    """The transcript in order (what ``get-messages`` returns)."""
    return [row.data for row in ChatMessage.objects.filter(instance=instance).only("data")]


def _next_position(instance: AgentInstance) -> int:
    last = ChatMessage.objects.filter(instance=instance).aggregate(m=Max("position"))["m"]
    return 0 if last is None else last + 1


def _tool_call_ids(message: UIMessage) -> set[str]:
    return {p["toolCallId"] for p in message.get("parts", []) if is_tool_part(p) and "toolCallId" in p}


def persist(
    instance: AgentInstance, incoming: list[UIMessage], *, delete_stale: bool = False
) -> list[UIMessage]:
    """Merge a client's copy of the transcript into the stored one and return the result.

    * A message with a known id replaces the stored one in place, unless the server already has
      tool outputs the client's copy lacks (server-known results win, spec §4.2 step 1).
    * An assistant message sharing a tool call id with a stored one takes the stored id.
    * New messages are appended in the order given.
    * ``delete_stale`` (a chat request): when every incoming id is already stored, the client sent
      a subset (regenerate trimmed the last reply), so stored rows it left out are deleted.
    """
    with transaction.atomic():
        AgentInstance.objects.touch(instance.pk)
        rows = {row.message_id: row for row in ChatMessage.objects.filter(instance=instance)}
        known = set(rows)
        by_tool_call = {cid: mid for mid, row in rows.items() for cid in _tool_call_ids(row.data)}
        position = max((row.position for row in rows.values()), default=-1) + 1
        seen: list[str] = []
        for message in incoming:
            message_id = message["id"]
            if message_id not in rows and message.get("role") == "assistant":
                shared = _tool_call_ids(message) & by_tool_call.keys()
                if shared:
                    message_id = by_tool_call[next(iter(shared))]
                    message = {**message, "id": message_id}
            seen.append(message_id)
            row = rows.get(message_id)
            if row is None:
                rows[message_id] = ChatMessage.objects.create(
                    instance=instance, message_id=message_id, role=message["role"],
                    position=position, data=message,
                )
                position += 1
            else:
                merged = _keep_server_tool_results(row.data, message)
                if merged != row.data:
                    row.data = merged
                    row.role = merged["role"]
                    row.save(update_fields=["data", "role", "updated_at"])
        if delete_stale and incoming and all(mid in known for mid in seen):
            stale = set(rows) - set(seen)
            if stale:
                ChatMessage.objects.filter(instance=instance, message_id__in=stale).delete()
        return load(instance)


def _keep_server_tool_results(stored: UIMessage, incoming: UIMessage) -> UIMessage:
    """The incoming message, with tool parts the server has already settled kept as stored.

    The server is the authority on a settled call: a client's copy may predate a result, an
    approval decided later by staff, or the descriptors the AI SDK does not keep on an output
    (``approvalDescriptor``), and must not overwrite them.
    """
    settled = {
        p["toolCallId"]: p
        for p in stored.get("parts", [])
        if is_tool_part(p) and p.get("state") in ("output-available", "output-error", "output-denied")
    }
    if not settled:
        return incoming
    parts = [settled.get(p.get("toolCallId"), p) if is_tool_part(p) else p for p in incoming.get("parts", [])]
    return {**incoming, "parts": parts}


def update_tool_part(instance: AgentInstance, matches: Callable[[dict[str, Any]], bool],
                     update: Callable[[dict[str, Any]], dict[str, Any]]) -> UIMessage | None:
    """Replace the newest tool part that ``matches`` by ``update(part)``; the updated message, or None.

    One transaction with the instance's replies locked, so updates of one reply (a client's
    answer, a staff decision) are serialised. ``update`` may raise to refuse the change.
    """
    with transaction.atomic():
        AgentInstance.objects.touch(instance.pk)
        rows = ChatMessage.objects.select_for_update().filter(instance=instance, role="assistant").order_by("-position")
        for row in rows:
            parts = row.data.get("parts", [])
            for index, part in enumerate(parts):
                if is_tool_part(part) and matches(part):
                    row.data = {**row.data, "parts": [*parts[:index], update(part), *parts[index + 1:]]}
                    row.save(update_fields=["data", "updated_at"])
                    return row.data
    return None


def save_message(instance: AgentInstance, message: UIMessage, *, after: str | None = None) -> None:
    """Insert or replace one message (the server's own writes: replies, tool results).

    A new message goes at the end, or right after message ``after`` when that one is stored
    (a recovered reply goes after the request it answers, before messages sent since).
    """
    with transaction.atomic():
        AgentInstance.objects.touch(instance.pk)
        updated = ChatMessage.objects.filter(instance=instance, message_id=message["id"]).update(
            data=message, role=message["role"], updated_at=timezone.now()
        )
        if updated:
            return
        anchor = ChatMessage.objects.filter(instance=instance, message_id=after).first() if after else None
        if anchor is None:
            position = _next_position(instance)
        else:
            position = anchor.position + 1
            ChatMessage.objects.filter(instance=instance, position__gte=position).update(position=F("position") + 1)
        ChatMessage.objects.create(
            instance=instance, message_id=message["id"], role=message["role"], position=position, data=message,
        )


def clear(instance: AgentInstance) -> None:
    """Delete the transcript and the stored request context."""
    with transaction.atomic():
        AgentInstance.objects.touch(instance.pk)
        ChatMessage.objects.filter(instance=instance).delete()
        RequestContext.objects.filter(instance=instance).delete()


def store_request_context(
    instance: AgentInstance, body: dict[str, Any] | None, client_tools: list[dict[str, Any]] | None
) -> None:
    """Remember the last custom body and client tools (continuations reuse them)."""
    RequestContext.objects.update_or_create(
        instance=instance, defaults={"body": body, "client_tools": client_tools}
    )


def request_context(instance: AgentInstance) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    ctx = RequestContext.objects.filter(instance=instance).first()
    return (ctx.body, ctx.client_tools) if ctx else (None, None)
