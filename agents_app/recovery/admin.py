"""The admin of recovery incidents: turns cut by a crash or a stalled stream, and their attempts."""

from django.contrib import admin
from django.http import HttpRequest

from ..admin_base import ReadOnlyAdmin
from ..models import RecoveryIncident, Turn


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
    """Turns cut by a crash or a stalled stream, and how their recovery went (``recovery.service``)."""

    list_display = ["root_request_id", "instance", "status", "kind", "attempts_total", "reason", "created_at",
                    "finished_at"]
    list_filter = ["status", "kind", "reason"]
    search_fields = ["root_request_id", "incident_id", "instance__name"]
    list_select_related = ["instance"]
    fields = ["incident_id", "instance", "root_request_id", "status", "kind", "attempt", "attempts_total", "work",
              "last_progress_at", "reason", "error", "created_at", "updated_at", "finished_at"]
    inlines = [IncidentTurnInline]
