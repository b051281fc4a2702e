"""The demo agent's side effects, visible in the admin: one row per refund actually made."""

from django.db import models


class Refund(models.Model):
    """A refund the demo ``refund_order`` action made. The ledger guarantees one per idempotency key."""

    order_id = models.CharField(max_length=100)
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    reason = models.TextField(blank=True, default="")
    # The action call that made it: lets a reader match a refund to the conversation.
    request_id = models.CharField(max_length=200, blank=True, default="")
    tool_call_id = models.CharField(max_length=200, blank=True, default="")
    # The call's ledger key (``ctx.idempotency_key``): one refund per key, even when a retry after
    # a crash (the ledger's lease passed with the refund made but not recorded) runs the action again.
    idempotency_key = models.TextField(null=True, blank=True)  # noqa: DJ001 - None: a call without a key
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["idempotency_key"], name="unique_refund_idempotency_key")]

    def __str__(self) -> str:
        return f"refund of {self.amount} on order {self.order_id}"
