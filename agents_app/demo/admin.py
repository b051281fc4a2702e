"""The demo's refunds in the admin: the visible side effect of ``refund_order`` (one per order)."""

from django.contrib import admin

from ..admin_base import ReadOnlyAdmin
from .models import Refund


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdmin):
    """The record of what the action did: read-only, as the agents app's rows are."""

    list_display = ["order_id", "amount", "reason", "request_id", "tool_call_id", "created_at"]
    search_fields = ["order_id", "request_id"]
    readonly_fields = list_display
