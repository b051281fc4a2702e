"""Admin of the agents app: read-only views of what the engine wrote, and the approvals queue.

Every admin here is an adapter (style guide, rule 4): it reads rows to show them, and a decision
on a paused action goes through ``approvals.approve_execution`` / ``approvals.reject_execution``,
the same entry points as the API and the chat page. Nothing here adds, updates or deletes an agent row.
"""

import contextlib
import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from asgiref.sync import async_to_sync
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.timesince import timesince
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from . import approvals, registry
from .errors import AgentConfigurationError
from .messages import is_tool_part, tool_name
from .models import (
    AgentInstance,
    ApprovalDecision,
    ChatMessage,
    LedgerEntry,
    PendingApproval,
    RecoveryIncident,
    Turn,
)
from .registry import agent_classes

# Messages of the instance's transcript shown on a pending approval's page: enough to see what
# the user asked and what the model said around the paused call, few enough to read at a glance.
CONVERSATION_MESSAGES = 20
# Messages shown on an instance's page: the recent conversation (the whole transcript is on the
# REST API: /api/agents/<slug>/<name>/messages/).
TRANSCRIPT_MESSAGES = 200
# Characters of an action's output quoted in the "Approved …" message (the rest is in the
# decision's audit row).
OUTCOME_PREVIEW_CHARS = 200

RISK_COLOURS = {
    PendingApproval.Risk.LOW: "#2e7d32",
    PendingApproval.Risk.MEDIUM: "#b26a00",
    PendingApproval.Risk.HIGH: "#c62828",
}
DECISION_COLOURS = {
    ApprovalDecision.Decision.APPROVED: "#2e7d32",
    ApprovalDecision.Decision.REJECTED: "#c62828",
    ApprovalDecision.Decision.EXPIRED: "#616161",
}


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


@admin.register(AgentInstance)
class AgentInstanceAdmin(ReadOnlyAdmin):
    """One conversation: who owns it, a link to open it in the chat, and its transcript as messages."""

    list_display = ["slug", "name", "owner", "created_at", "updated_at"]
    list_filter = ["slug"]
    search_fields = ["name", "owner__username"]
    list_select_related = ["owner"]
    fields = ["slug", "name", "owner", "chat_link", "created_at", "updated_at", "terminal_error", "approval_links"]
    readonly_fields = ["chat_link", "created_at", "updated_at", "approval_links"]
    inlines = [TurnInline]

    @admin.display(description="chat")
    def chat_link(self, obj: AgentInstance) -> str:
        """The chat page of the conversation, at the address staff open it by (README "Conversations")."""
        url = reverse("agents_app:chat", args=[obj.slug, obj.name]) + registry.staff_query(obj)
        return format_html("<a href='{}' id='open-in-chat'>Open in chat</a>", url)

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


class IncidentTurnInline(admin.TabularInline):
    """The turns of an incident: the cut ones and the recovery attempts."""

    model = Turn
    fk_name = "incident"
    fields = ["request_id", "kind", "status", "continuation", "worker", "started_at", "finished_at", "error"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["id"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(RecoveryIncident)
class RecoveryIncidentAdmin(ReadOnlyAdmin):
    """Turns cut by a crash or a stalled stream, and how their recovery went (``turns.recovery``)."""

    list_display = ["root_request_id", "instance", "status", "kind", "attempts_total", "reason", "created_at",
                    "finished_at"]
    list_filter = ["status", "kind", "reason"]
    search_fields = ["root_request_id", "incident_id", "instance__name"]
    list_select_related = ["instance"]
    fields = ["incident_id", "instance", "root_request_id", "status", "kind", "attempt", "attempts_total", "work",
              "last_progress_at", "reason", "error", "created_at", "updated_at", "finished_at"]
    inlines = [IncidentTurnInline]


class RejectForm(forms.Form):
    """The reason the model is told when an approver rejects (optional: the model is told anyway)."""

    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))

    def cleaned_reason(self) -> str | None:
        self.full_clean()
        return self.cleaned_data.get("reason") or None


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


class ActionFilter(RegistryFilter):
    title = "action"
    parameter_name = field = "action_name"

    def choices_from_registry(self) -> list[str]:
        names: set[str] = set()
        for agent_class in agent_classes().values():
            with contextlib.suppress(AgentConfigurationError):  # reported by system check E003
                names.update(agent_class(SimpleNamespace(name="", pk=None)).compiled_actions())
        return sorted(names)


@admin.register(PendingApproval)
class PendingApprovalAdmin(ReadOnlyAdmin):
    """The queue of paused action calls: look at one, then Approve or Reject it.

    Only approvers (``approvals.can_approve``) see it at all. A decision goes through the service,
    which claims the row by deleting it, so two approvers racing on one call get one success and
    one "no longer pending" error, shown as an error message.
    """

    list_display = ["conversation", "owner", "action_name", "summary", "risk_badge", "requester", "age"]
    list_display_links = ["action_name", "summary"]
    list_filter = ["risk", ActionFilter, AgentFilter]
    search_fields = ["action_name", "summary", "instance__name", "execution_id", "instance__owner__username"]
    list_select_related = ["instance__owner", "requested_by"]
    show_full_result_count = False
    ordering = ["created_at", "execution_id"]
    actions = ["approve_selected", "reject_selected"]
    fieldsets = [
        (None, {"fields": ["execution_id", "agent_link", "action_name", "summary", "risk_badge", "permissions",
                           "requester", "created_at", "input_pretty"]}),
    ]
    readonly_fields = ["agent_link", "risk_badge", "permissions", "requester", "input_pretty"]

    # --- who may see and decide ---------------------------------------------------------------
    def has_module_permission(self, request: HttpRequest) -> bool:
        return approvals.can_approve(request.user)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return approvals.can_approve(request.user)

    def has_approve_permission(self, request: HttpRequest) -> bool:
        return approvals.can_approve(request.user)

    # --- columns and fields -------------------------------------------------------------------
    @admin.display(description="agent / instance", ordering="instance__name")
    def conversation(self, obj: PendingApproval) -> str:
        return str(obj.instance)

    @admin.display(description="owner", ordering="instance__owner__username")
    def owner(self, obj: PendingApproval) -> Any:
        return obj.instance.owner

    @admin.display(description="risk", ordering="risk")
    def risk_badge(self, obj: PendingApproval) -> str:
        return badge(obj.risk, RISK_COLOURS[obj.risk]) if obj.risk else ""

    @admin.display(description="requester", ordering="requested_by__username")
    def requester(self, obj: PendingApproval) -> Any:
        return obj.requested_by

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: PendingApproval) -> str:
        return timesince(obj.created_at, depth=1)

    @admin.display(description="agent / instance")
    def agent_link(self, obj: PendingApproval) -> str:
        url = reverse("admin:agents_app_agentinstance_change", args=[obj.instance_id])
        return format_html("<a href='{}'>{}</a> (owner: {})", url, obj.instance, obj.instance.owner or "-")

    @admin.display(description="permissions")
    def permissions(self, obj: PendingApproval) -> str:
        return ", ".join(obj.descriptor.get("permissions") or []) or "-"

    @admin.display(description="input")
    def input_pretty(self, obj: PendingApproval) -> str:
        return pretty_json(obj.input)

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], add: bool = False,
                           change: bool = False, form_url: str = "", obj: PendingApproval | None = None) -> Any:
        """Add the conversation around the call and the Reject form to the (read-only) detail page."""
        if obj is not None:
            context["conversation"] = conversation(obj.instance_id, obj.tool_call_id)
            context["reject_form"] = RejectForm()
            context["can_decide"] = self.has_approve_permission(request)
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- deciding -----------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        def view(decide: Callable[..., HttpResponse], verb: str) -> URLPattern:
            name = f"{self.opts.app_label}_{self.opts.model_name}_{verb}"
            return path(f"<path:object_id>/{verb}/", self.admin_site.admin_view(require_POST(decide)), name=name)

        return [view(self.approve_view, "approve"), view(self.reject_view, "reject"), *super().get_urls()]

    def approve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The detail page's Approve button."""
        return self._decide_one(request, unquote(object_id), None)

    def reject_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The detail page's Reject form (with its optional reason)."""
        return self._decide_one(request, unquote(object_id), RejectForm(request.POST).cleaned_reason(), reject=True)

    @admin.action(permissions=["approve"], description="Approve selected")
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[PendingApproval]) -> None:
        self._decide_each(request, queryset, None)

    @admin.action(permissions=["approve"], description="Reject selected")
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[PendingApproval]) -> HttpResponse | None:
        """Ask for a reason on an intermediate page (as ``delete_selected`` asks to confirm), then reject."""
        if "post" not in request.POST:
            context = {
                **self.admin_site.each_context(request),
                "title": "Reject the selected actions?",
                "opts": self.opts,
                "queryset": queryset.select_related("instance"),
                "form": RejectForm(),
                "action_checkbox_name": ACTION_CHECKBOX_NAME,
            }
            request.current_app = self.admin_site.name
            return TemplateResponse(request, "admin/agents_app/pendingapproval/reject_selected.html", context)
        self._decide_each(request, queryset, RejectForm(request.POST).cleaned_reason(), reject=True)
        return None

    def _decide_one(self, request: HttpRequest, execution_id: str, reason: str | None, *,
                    reject: bool = False) -> HttpResponse:
        """Decide one execution, say what came of it, and go back to the queue."""
        if not self.has_approve_permission(request):
            raise PermissionDenied
        pending = self.get_object(request, execution_id)
        label = str(pending) if pending is not None else execution_id
        ok, outcome = self._decide(request, execution_id, reason, reject=reject)
        if ok and reject:
            self.message_user(request, f"Rejected {label}.", messages.SUCCESS)
        elif ok:
            shown = outcome if isinstance(outcome, str) else json.dumps(outcome, ensure_ascii=False)
            self.message_user(request, f"Approved {label}: {Truncator(shown).chars(OUTCOME_PREVIEW_CHARS)}",
                              messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:agents_app_pendingapproval_changelist"))

    def _decide_each(self, request: HttpRequest, queryset: QuerySet[PendingApproval], reason: str | None, *,
                     reject: bool = False) -> None:
        """One service call per selected row: each is its own claim, so one lost race fails alone."""
        decided = sum(
            self._decide(request, execution_id, reason, reject=reject)[0]
            for execution_id in self._selected(request, queryset)
        )
        if decided:
            verb = "Rejected" if reject else "Approved"
            self.message_user(request, ngettext("%(verb)s %(n)d action.", "%(verb)s %(n)d actions.", decided)
                              % {"verb": verb, "n": decided}, messages.SUCCESS)

    @staticmethod
    def _selected(request: HttpRequest, queryset: QuerySet[PendingApproval]) -> list[str]:
        """The ticked executions, including those decided elsewhere since the list was drawn.

        Django narrows ``queryset`` to rows that still exist, which would drop a lost race
        silently; asking the service about each ticked id reports it as no longer pending.
        "Select all" has no ticked ids: then it is the (filtered) queryset.
        """
        if request.POST.get("select_across") == "1":
            return list(queryset.values_list("execution_id", flat=True))
        return request.POST.getlist(ACTION_CHECKBOX_NAME)

    def _decide(self, request: HttpRequest, execution_id: str, reason: str | None, *,
                reject: bool) -> tuple[bool, Any]:
        """Call the service once; an error outcome (a lost race, a vanished action) becomes an error message."""
        if reject:
            outcome = async_to_sync(approvals.reject_execution)(execution_id, reason, actor=request.user)
        else:
            outcome = async_to_sync(approvals.approve_execution)(execution_id, actor=request.user)
        if approvals.is_error(outcome):
            self.message_user(request, outcome.get("error") or str(outcome), messages.ERROR)
            return False, outcome
        return True, outcome


@admin.register(ApprovalDecision)
class ApprovalDecisionAdmin(ReadOnlyAdmin):
    """The append-only audit log of decisions, for approvers and for whoever may view it."""

    list_display = ["decision_badge", "action_name", "instance", "decided_by", "decided_at", "reason"]
    list_filter = ["decision", "action_name"]
    search_fields = ["execution_id", "action_name", "instance__name", "decided_by__username", "reason"]
    list_select_related = ["instance", "decided_by"]
    show_full_result_count = False
    date_hierarchy = "decided_at"
    fields = ["execution_id", "decision_badge", "action_name", "instance", "decided_by", "requested_at",
              "decided_at", "reason", "result_pretty", "descriptor_pretty"]
    readonly_fields = ["decision_badge", "result_pretty", "descriptor_pretty"]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return approvals.can_approve(request.user) or super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return approvals.can_approve(request.user) or super().has_view_permission(request, obj)

    @admin.display(description="decision", ordering="decision")
    def decision_badge(self, obj: ApprovalDecision) -> str:
        return badge(obj.decision, DECISION_COLOURS.get(obj.decision, "#616161"))

    @admin.display(description="result")
    def result_pretty(self, obj: ApprovalDecision) -> str:
        return pretty_json(obj.result)

    @admin.display(description="descriptor")
    def descriptor_pretty(self, obj: ApprovalDecision) -> str:
        return pretty_json(obj.descriptor)


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


# Scheduled prompts have an admin module of their own; importing it registers it.
from . import schedule_admin  # noqa: E402, F401 - registers the scheduled prompts' admin (its own module)
