"""The demo's refunds in the admin: the visible side effect of ``refund_order`` (one per order)."""

from django.contrib import admin
from django.http import HttpRequest

from .models import Refund


@admin.register(Refund)
class RefundAdmin(admin.ModelAdmin):
    """The record of what the action did: read-only, as the agents app's rows are."""

    list_display = ["order_id", "amount", "reason", "request_id", "tool_call_id", "created_at"]
    search_fields = ["order_id", "request_id"]
    readonly_fields = list_display

    class Media:
        css = {"all": ["agents_app/admin.css"]}  # long values wrap in the list

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
