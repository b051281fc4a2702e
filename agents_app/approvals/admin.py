"""The admin of staff approvals: the queue of parked action calls and the decision log."""

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
from django.utils.text import Truncator
from django.utils.timesince import timesince
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from ..admin_base import AgentFilter, ReadOnlyAdmin, RegistryFilter, badge, conversation, indented, pretty_json
from ..errors import AgentConfigurationError
from ..models import ApprovalDecision, PendingApproval
from ..registry import agent_classes
from . import service as approvals

# Characters of an action's output quoted in the "Approved …" message (the rest is in the
# decision's audit row).
OUTCOME_PREVIEW_CHARS = 200
# Characters of an action's input in the queue's "input" column: enough to tell two deploys apart.
INPUT_SUMMARY_CHARS = 80
# Characters of an action's input (indented JSON) on a confirmation page; the call's page has all.
CONFIRM_INPUT_CHARS = 2000
CONFIRMATION_TEMPLATE = "admin/agents_app/pendingapproval/approve_selected.html"

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


def input_summary(value: Any) -> str:
    """An input on one short line, ``version=1.0.0, environment=production``, for the queue.

    Plain text (the admin escapes it): the input is the model's, so it may hold anything.
    """
    if isinstance(value, dict):
        text = ", ".join(f"{key}={_plain(item)}" for key, item in value.items())
    else:
        text = _plain(value)
    return Truncator(" ".join(text.split())).chars(INPUT_SUMMARY_CHARS)


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def needs_confirmation(pending: PendingApproval) -> bool:
    """Whether approving this call, even alone, goes through the confirmation page: high risk does."""
    return pending.risk == PendingApproval.Risk.HIGH


class RejectForm(forms.Form):
    """The reason the model is told when an approver rejects (optional: the model is told anyway)."""

    reason = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))

    def cleaned_reason(self) -> str | None:
        self.full_clean()
        return self.cleaned_data.get("reason") or None


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
    one "no longer pending" error, shown as an error message. Approving runs the action, so bulk
    approval and a high-risk call's Approve first show each call with its input and risk.
    """

    # The action's summary is the same for every call of it, so it sits under the action's name; the
    # input is what tells two calls apart, so it has the column (and the list still fits 1280 px).
    list_display = ["conversation", "owner", "action", "input_summary", "risk_badge", "requester", "age"]
    list_display_links = ["action"]
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

    class Media:
        css = {"all": ["agents_app/approvals-admin.css"]}

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

    @admin.display(description="action", ordering="action_name")
    def action(self, obj: PendingApproval) -> str:
        if not obj.summary:
            return obj.action_name
        return format_html("{}<br><span class='action-summary'>{}</span>", obj.action_name, obj.summary)

    @admin.display(description="input")
    def input_summary(self, obj: PendingApproval) -> str:
        return input_summary(obj.input)

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
            context["confirm_approval"] = needs_confirmation(obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- deciding -----------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        def view(decide: Callable[..., HttpResponse], verb: str) -> URLPattern:
            name = f"{self.opts.app_label}_{self.opts.model_name}_{verb}"
            return path(f"<path:object_id>/{verb}/", self.admin_site.admin_view(require_POST(decide)), name=name)

        return [view(self.approve_view, "approve"), view(self.reject_view, "reject"), *super().get_urls()]

    def approve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The detail page's Approve button: at once, unless the call is high risk (then it confirms first)."""
        if not self.has_approve_permission(request):
            raise PermissionDenied
        execution_id = unquote(object_id)
        pending = self.get_object(request, execution_id)
        if pending is not None and needs_confirmation(pending) and "post" not in request.POST:
            return self._confirmation(request, [pending], [], single=True, title="Approve this action?",
                                      template=CONFIRMATION_TEMPLATE)
        return self._decide_one(request, execution_id, None)

    def reject_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The detail page's Reject form (with its optional reason)."""
        return self._decide_one(request, unquote(object_id), RejectForm(request.POST).cleaned_reason(), reject=True)

    @admin.action(permissions=["approve"], description="Approve selected")
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[PendingApproval]) -> HttpResponse | None:
        """Show what would run (each call with its input and risk) on an intermediate page, then approve.

        As ``delete_selected`` does, only the page's own POST (``post=yes``) decides.
        """
        if "post" not in request.POST:
            rows, gone = self._selection(request, queryset)
            return self._confirmation(request, rows, gone, title="Approve the selected actions?",
                                      template=CONFIRMATION_TEMPLATE, action_name="approve_selected")
        self._decide_each(request, queryset, None)
        return None

    @admin.action(permissions=["approve"], description="Reject selected")
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[PendingApproval]) -> HttpResponse | None:
        """Ask for a reason on an intermediate page (as ``delete_selected`` asks to confirm), then reject."""
        if "post" not in request.POST:
            rows, gone = self._selection(request, queryset)
            return self._confirmation(request, rows, gone, title="Reject the selected actions?",
                                      template="admin/agents_app/pendingapproval/reject_selected.html",
                                      form=RejectForm(), action_name="reject_selected")
        self._decide_each(request, queryset, RejectForm(request.POST).cleaned_reason(), reject=True)
        return None

    def _selection(self, request: HttpRequest,
                   queryset: QuerySet[PendingApproval]) -> tuple[list[PendingApproval], list[str]]:
        """The selected calls still pending, and the ticked ids decided elsewhere since the list was drawn."""
        rows = list(queryset.select_related("instance__owner", "requested_by"))
        present = {row.pk for row in rows}
        gone = [pk for pk in request.POST.getlist(ACTION_CHECKBOX_NAME) if pk not in present]
        return rows, gone

    def _confirmation(self, request: HttpRequest, pendings: list[PendingApproval], gone: list[str], *, title: str,
                      template: str, single: bool = False, **extra: Any) -> TemplateResponse:
        """The page that lists each call about to be decided (input, risk, conversation) and asks to confirm."""
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "media": self.media,
            "single": single,
            "original": pendings[0] if single else None,
            "rows": [{
                "obj": pending,
                "input": format_html("<pre style='white-space:pre-wrap;margin:0'>{}</pre>",
                                     Truncator(indented(pending.input)).chars(CONFIRM_INPUT_CHARS)),
                "risk": self.risk_badge(pending) or "-",
            } for pending in pendings],
            "no_longer_pending": gone,
            "high_risk": sum(needs_confirmation(pending) for pending in pendings),
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            **extra,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, template, context)

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
