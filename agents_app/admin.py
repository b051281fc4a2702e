"""The admin: conversations, turns and the action ledger here; each feature registers its own
pages (approvals, recovery incidents, scheduled prompts), imported below so that Django's admin
autodiscovery, which imports this module, finds them all."""

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from . import registry
from .admin_base import ReadOnlyAdmin, conversation, pretty_json
from .approvals import admin as approvals_admin
from .lifecycle.admin import DestroyMixin
from .models import AgentInstance, LedgerEntry, Turn
from .recovery import admin as recovery_admin
from .schedules import admin as schedules_admin
from .usage import admin as usage_admin

# The features' admin modules, registered by being imported.
__all__ = ["approvals_admin", "recovery_admin", "schedules_admin", "usage_admin"]

# Messages shown on an instance's page: the recent conversation (the whole transcript is on the
# REST API: /api/agents/<slug>/<name>/messages/).
TRANSCRIPT_MESSAGES = 200


class TurnInline(admin.TabularInline):
    model = Turn
    fields = ["request_id", "kind", "status", "created_at", "started_at", "finished_at", "error", "ledger"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-id"]
    # Folded: the page is about the conversation; the turns are there when asked for.
    classes = ["collapse"]

    @admin.display(description="ledger")
    def ledger(self, obj: Turn) -> str:
        """The action-ledger rows the turn's tool calls wrote (they carry its request id)."""
        url = reverse("admin:agents_app_ledgerentry_changelist")
        return format_html("<a href='{}?request_id__exact={}'>ledger entries</a>", url, obj.request_id)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class SubAgentInline(admin.TabularInline):
    """The sub-agents of an instance (``agent.sub_agent``), each a conversation of its own."""

    model = AgentInstance
    fk_name = "parent"
    verbose_name = "sub-agent"
    fields = ["conversation", "created_at", "updated_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["slug", "name"]

    @admin.display(description="sub-agent")
    def conversation(self, obj: AgentInstance) -> str:
        url = reverse("admin:agents_app_agentinstance_change", args=[obj.pk])
        return format_html("<a href='{}'>{}/{}</a>", url, obj.slug, obj.name)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AgentInstance)
class AgentInstanceAdmin(DestroyMixin, ReadOnlyAdmin):
    """One conversation: who owns it, a link to open it in the chat, its transcript as messages, and
    its sub-agents (a sub-agent's page links back to its parent)."""

    list_display = ["slug", "name", "owner", "parent", "created_at", "updated_at"]
    list_filter = ["slug"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner", "parent"]
    fields = ["slug", "name", "owner", "parent", "chat_link", "created_at", "updated_at", "terminal_error",
              "approval_links"]
    readonly_fields = ["chat_link", "created_at", "updated_at", "approval_links"]
    inlines = [SubAgentInline, TurnInline]

    @admin.display(description="chat")
    def chat_link(self, obj: AgentInstance) -> str:
        """The chat page of the conversation, at the address staff open it by (README "Conversations")."""
        return format_html("<a href='{}' id='open-in-chat'>Open in chat</a>",
                           registry.staff_chat_url(obj))

    @admin.display(description="approvals")
    def approval_links(self, obj: AgentInstance) -> str:
        """Links to the instance's waiting actions and its decision log."""
        pending = reverse("admin:agents_app_pendingapproval_changelist")
        decided = reverse("admin:agents_app_approvaldecision_changelist")
        return format_html(
            "<a href='{}?instance__id__exact={}'>pending approvals ({})</a> · "
            "<a href='{}?instance__id__exact={}'>decisions</a>",
            pending, obj.pk, obj.pending_approvals.count(), decided, obj.pk,
        )

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], add: bool = False,
                           change: bool = False, form_url: str = "", obj: AgentInstance | None = None) -> Any:
        """Add the transcript, as messages with tool cards, below the instance's fields."""
        if obj is not None:
            context["conversation"] = conversation(obj.pk, limit=TRANSCRIPT_MESSAGES)
            context["message_count"] = obj.messages.count()
        return super().render_change_form(request, context, add, change, form_url, obj)


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ["request_id", "instance", "kind", "status", "created_at", "finished_at", "recovery"]
    list_filter = ["status", "kind"]
    search_fields = ["request_id"]
    list_select_related = ["instance", "incident"]
    show_full_result_count = False

    @admin.display(description="recovery")
    def recovery(self, obj: Turn) -> str:
        """The recovery incident the turn was cut in, or is an attempt of."""
        if obj.incident is None:
            return ""
        url = reverse("admin:agents_app_recoveryincident_change", args=[obj.incident_id])
        return format_html("<a href='{}'>{}</a>", url, obj.incident.status)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    """The action idempotency ledger, to see what ran (``settled``) or is running (``pending``)."""

    list_display = ["key", "action_name", "status", "request_id", "tool_call_id", "created_at", "updated_at"]
    # No filter on action_name: its choices would be a DISTINCT over the whole (large, unindexed
    # on that column) ledger on every page; searching for it is asked for, not paid on each view.
    list_filter = ["status"]
    search_fields = ["key", "action_name", "request_id", "tool_call_id"]
    show_full_result_count = False
    ordering = ["-updated_at"]
    fields = ["key", "action_name", "status", "request_id", "tool_call_id", "input_hash", "created_at",
              "updated_at", "result_pretty"]
    readonly_fields = ["result_pretty"]

    @admin.display(description="result")
    def result_pretty(self, obj: LedgerEntry) -> str:
        """The stored ``{"valuePresent", "value"}`` result, decoded (empty while pending)."""
        return pretty_json(json.loads(obj.result_json)) if obj.result_json else "-"
