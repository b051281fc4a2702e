"""The admin of model usage: every turn's usage with totals by day, user and agent and a chart
of the filtered rows; the turns quotas refused; and per-user quotas, which staff edit."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from ..admin_base import AgentFilter, ReadOnlyAdmin
from ..models import TurnUsage, UsageQuota
from . import chart, service

# Rows of the "by user" and "by agent" tables: the heaviest users and agents of the filtered rows.
TOP = 20


class RefusedFilter(admin.SimpleListFilter):
    """Turns a quota refused (``TurnUsage.limit``): who hit which limit, and when."""

    title = "quota"
    parameter_name = "refused"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "refused by a quota"), ("no", "ran")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.exclude(limit="")
        if self.value() == "no":
            return queryset.filter(limit="")
        return queryset


@admin.register(TurnUsage)
class TurnUsageAdmin(ReadOnlyAdmin):
    list_display = [
        "day",
        "agent",
        "user",
        "model",
        "requests",
        "input_tokens",
        "output_tokens",
        "cost",
        "limit",
        "turn_link",
    ]
    list_filter = [AgentFilter, RefusedFilter, "model"]
    date_hierarchy = "day"
    search_fields = ["user__username", "turn__request_id"]
    list_select_related = ["user", "turn"]
    ordering = ["-id"]
    fields = [
        "turn_link",
        "agent",
        "user",
        "day",
        "model",
        "requests",
        "input_tokens",
        "output_tokens",
        "cost",
        "limit",
        "created_at",
    ]

    @admin.display(description="turn")
    def turn_link(self, obj: TurnUsage) -> str:
        if obj.turn is None:
            return "(conversation deleted)"
        url = reverse("admin:agents_app_turn_change", args=[obj.turn_id])
        return format_html("<a href='{}'>{}</a>", url, obj.turn.request_id)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        """The list, with the report of the rows its filters select (totals, by day, user, agent)."""
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse) and "cl" in (response.context_data or {}):
            rows = response.context_data["cl"].queryset.order_by()
            days = service.grouped(rows, "day")
            response.context_data.update(
                usage_totals=service.totals(rows),
                usage_chart=chart.tokens_by_day(days),
                usage_by_user=service.grouped(rows, "user")[:TOP],
                usage_by_agent=service.grouped(rows, "agent")[:TOP],
            )
        return response


@admin.register(UsageQuota)
class UsageQuotaAdmin(admin.ModelAdmin):
    """A user's own token limits; they replace the ``AGENT_USAGE_QUOTAS`` per-user defaults for that user."""

    list_display = ["user", "tokens_per_day", "tokens_per_month", "updated_at"]
    search_fields = ["user__username"]
    raw_id_fields = ["user"]
    fields = ["user", "tokens_per_day", "tokens_per_month"]
