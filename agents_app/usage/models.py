"""Tables of usage and quotas; imported by ``agents_app.models`` (one app, one set of migrations).

Their foreign keys name models by string, so this module imports nothing of the app's and sits
below ``agents_app.models``.
"""

from django.conf import settings
from django.db import models


class TurnUsage(models.Model):
    """What one turn's model runs used, written in the transaction that ends the turn.

    ``agent``, ``user`` and ``day`` are copied from the turn so the usage reports and the quota
    sums read this table alone (one index each). A turn refused by a quota has a row too, with
    ``limit`` naming the limit it hit and zero usage: staff see who hit a limit.
    """

    # Kept when the conversation (and so the turn) is deleted: what was used still counts.
    turn = models.OneToOneField(
        "agents_app.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="usage"
    )
    agent = models.CharField(max_length=100)
    # No index of its own: ``turn_usage_user_day`` starts with it (docs/decisions.md#foreign-key-indexes).
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_index=False
    )
    # The UTC day of the turn's end: quotas count whole UTC days and months.
    day = models.DateField()
    model = models.CharField(max_length=200, blank=True, default="")
    requests = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    # In the price table's currency (``AGENT_MODEL_PRICES``); null when the model has no price.
    cost = models.DecimalField(max_digits=14, decimal_places=6, null=True, blank=True)
    # The quota that refused the turn ("user per day", ...), or "" for a turn that ran.
    limit = models.CharField(max_length=40, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "turn usage"
        verbose_name_plural = "usage"
        indexes = [
            models.Index(fields=["user", "day"], name="turn_usage_user_day"),
            models.Index(fields=["agent", "day"], name="turn_usage_agent_day"),
            models.Index(fields=["day"], name="turn_usage_day"),
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.day}: {self.input_tokens}+{self.output_tokens} tokens"

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class UsageQuota(models.Model):
    """A user's own token limits, set by staff in the admin; they replace ``AGENT_USAGE_QUOTAS``'s
    per-user defaults for that user. An empty limit means no limit."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage_quota")
    tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True)
    tokens_per_month = models.PositiveBigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "user quota"

    def __str__(self) -> str:
        return f"quota of {self.user}"
