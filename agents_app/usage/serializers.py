"""The REST API's shapes of usage reports: the query, the sums, the groups."""

import datetime
from typing import Any

from rest_framework import serializers

from . import service

# The longest range one report may cover, in days (a report is one grouped query over it).
MAX_DAYS = 366
DEFAULT_DAYS = 30


class UsageFilterSerializer(serializers.Serializer[dict[str, Any]]):
    """Which usage a report covers and how it is grouped."""

    since = serializers.DateField(required=False, help_text="First UTC day (default: 29 days before `until`).")
    until = serializers.DateField(required=False, help_text="Last UTC day, included (default: today).")
    group_by = serializers.ChoiceField(
        choices=list(service.GROUPS), default="day", help_text="One row per day, user (staff), agent or model."
    )
    agent = serializers.CharField(required=False, max_length=100, help_text="Only this agent's (its slug).")
    user = serializers.CharField(
        required=False,
        max_length=150,
        help_text="Staff only: only this user's (a username). Others see their own usage.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        until = attrs.setdefault("until", service.today())
        since = attrs.setdefault("since", until - datetime.timedelta(days=DEFAULT_DAYS - 1))
        if since > until:
            raise serializers.ValidationError({"since": "must not be after `until`."})
        if (until - since).days >= MAX_DAYS:
            raise serializers.ValidationError({"since": f"a report covers at most {MAX_DAYS} days."})
        return attrs


class UsageSumsSerializer(serializers.Serializer[dict[str, Any]]):
    turns = serializers.IntegerField(help_text="Turns that ran a model or were refused by a quota.")
    requests = serializers.IntegerField(help_text="Model requests (a tool loop makes several per turn).")
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField(help_text="Input and output tokens: what quotas count.")
    cost = serializers.DecimalField(
        max_digits=20,
        decimal_places=6,
        allow_null=True,
        help_text="By the configured price table; null when no model used has a price.",
    )
    refused = serializers.IntegerField(help_text="Turns refused by a quota (they made no model request).")


class UsageGroupSerializer(UsageSumsSerializer):
    key = serializers.CharField(
        allow_null=True,
        help_text="The day, username, agent slug or model of the row "
        "(null: turns without a user, e.g. scheduled ones).",
    )


class UsageReportSerializer(serializers.Serializer[dict[str, Any]]):
    since = serializers.DateField()
    until = serializers.DateField()
    group_by = serializers.CharField()
    totals = UsageSumsSerializer()
    groups = UsageGroupSerializer(many=True)
