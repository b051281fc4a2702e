"""Read-only admin views of agent instances, their transcripts and turns."""

import json

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from .models import AgentInstance, ChatMessage, Turn


class ReadOnlyAdmin(admin.ModelAdmin):
    """Agent data is written by the engine only; the admin shows it."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class ChatMessageInline(admin.TabularInline):
    model = ChatMessage
    fields = ["position", "role", "message_id", "pretty"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    @admin.display(description="message")
    def pretty(self, obj: ChatMessage) -> str:
        return format_html("<pre style='white-space:pre-wrap'>{}</pre>", json.dumps(obj.data, indent=2))

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class TurnInline(admin.TabularInline):
    model = Turn
    fields = ["request_id", "kind", "status", "created_at", "started_at", "finished_at", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-id"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AgentInstance)
class AgentInstanceAdmin(ReadOnlyAdmin):
    list_display = ["slug", "name", "owner", "created_at", "updated_at"]
    list_filter = ["slug"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner"]
    inlines = [ChatMessageInline, TurnInline]


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ["request_id", "instance", "kind", "status", "created_at", "finished_at"]
    list_filter = ["status", "kind"]
    search_fields = ["request_id"]
    list_select_related = ["instance"]
    show_full_result_count = False
