"""What the admin pages of every feature share: a read-only base, JSON and badge display, a
transcript excerpt as readable messages, and list filters fed by the agent registry."""

import json
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .messages import is_tool_part, tool_name
from .models import ChatMessage
from .registry import agent_classes

# Messages of the instance's transcript shown on a pending approval's page: enough to see what
# the user asked and what the model said around the paused call, few enough to read at a glance.
CONVERSATION_MESSAGES = 20


def pretty_json(value: Any) -> SafeString:
    """JSON as an indented, wrapping ``<pre>`` (escaped: it holds model and user text)."""
    return format_html("<pre style='white-space:pre-wrap'>{}</pre>", indented(value))


def badge(text: str, colour: str) -> SafeString:
    return format_html(
        "<span style='background:{};color:#fff;padding:1px 8px;border-radius:8px;font-weight:600'>{}</span>",
        colour, text,
    )


def conversation(instance_id: int, tool_call_id: str | None = None,
                 limit: int = CONVERSATION_MESSAGES) -> list[dict[str, Any]]:
    """The last ``limit`` messages of a transcript, as readable messages rather than JSON.

    Each message is ``{"role", "parts"}``; a part is ``{"kind": "text", "text"}``, ``{"kind":
    "reasoning", "text"}``, ``{"kind": "data", "name", "data"}`` or ``{"kind": "tool", "name",
    "state", "input", "output", "error", "current"}`` (``current`` marks the call ``tool_call_id``,
    the one being decided). ``compacted`` marks a text or a tool output that was cut when it was
    stored (the message's ``metadata.compactedTextParts`` / ``compactedToolOutputs``). Other parts
    (step boundaries, files, sources) say nothing to a reader here.
    """
    rows = ChatMessage.objects.filter(instance_id=instance_id).order_by("-position").values_list("role", "data")
    return [{"role": role, "parts": readable_parts(data, tool_call_id)} for role, data in reversed(rows[:limit])]


def readable_parts(message: dict[str, Any], tool_call_id: str | None = None) -> list[dict[str, Any]]:
    metadata = message.get("metadata") or {}
    compacted_texts = set(metadata.get("compactedTextParts") or [])
    compacted_outputs = set(metadata.get("compactedToolOutputs") or [])
    parts = []
    for index, part in enumerate(message.get("parts", [])):
        kind = part.get("type", "")
        if kind in ("text", "reasoning"):
            parts.append({"kind": kind, "text": part.get("text", ""), "compacted": index in compacted_texts})
        elif kind.startswith("data-"):
            parts.append({"kind": "data", "name": kind.removeprefix("data-"), "data": indented(part.get("data"))})
        elif is_tool_part(part):
            parts.append({
                "kind": "tool", "name": tool_name(part), "state": part.get("state", ""),
                "input": indented(part.get("input")),
                "output": indented(part["output"]) if "output" in part else None,
                "error": part.get("errorText"), "current": part.get("toolCallId") == tool_call_id,
                "compacted": part.get("toolCallId") in compacted_outputs,
            })
    return parts


def indented(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Agent data is written by the engine only; the admin shows it: no add, change or delete.

    Deleting a row here would bypass what it means to the engine (a claim, an audit entry, a
    conversation's turns); a user deletes their own conversation through the REST API.
    """

    class Media:
        css = {"all": ["agents_app/admin.css"]}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False



class RegistryFilter(admin.SimpleListFilter):
    """A filter whose choices come from the registered agent classes, not from the rows.

    Django's field filters list choices with a ``SELECT DISTINCT`` over the whole queue on every
    page; the registry already knows every agent and action that can park.
    """

    field: str

    def choices_from_registry(self) -> list[str]:
        raise NotImplementedError("subclasses of RegistryFilter must provide choices_from_registry()")

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in self.choices_from_registry()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(**{self.field: self.value()}) if self.value() else queryset


class AgentFilter(RegistryFilter):
    title = "agent"
    parameter_name = field = "agent"

    def choices_from_registry(self) -> list[str]:
        return sorted(agent_classes())


