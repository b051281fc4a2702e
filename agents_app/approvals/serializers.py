"""The REST API's shapes of pending approvals and of a decision's outcome."""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..models import PendingApproval


class PendingApprovalSerializer(serializers.ModelSerializer[PendingApproval]):
    """One parked durable-pause action call, flattened for a reviewer.

    ``agent``, ``instance`` and ``owner`` come from the instance (the view selects it with its
    owner in the same query); ``permissions`` from the descriptor the model was shown.
    """

    agent = serializers.CharField(source="instance.slug", read_only=True)
    instance = serializers.CharField(source="instance.name", read_only=True)
    owner = serializers.CharField(source="instance.owner.username", read_only=True, allow_null=True)
    action = serializers.CharField(source="action_name", read_only=True)
    risk = serializers.ChoiceField(
        choices=PendingApproval.Risk.choices, allow_blank=True, read_only=True,
        help_text="The descriptor's risk; empty when the action declares none.",
    )
    permissions = serializers.SerializerMethodField()
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, allow_null=True)

    class Meta:
        model = PendingApproval
        fields = [
            "execution_id", "agent", "instance", "owner", "action", "summary", "risk", "input",
            "permissions", "descriptor", "requested_by", "created_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.ListField(child=serializers.CharField()))
    def get_permissions(self, obj: PendingApproval) -> list[str]:
        return list(obj.descriptor.get("permissions") or [])


class ApprovalFilterSerializer(serializers.Serializer[Any]):
    """The list's query parameters; each given one narrows the list (exact match)."""

    risk = serializers.ChoiceField(choices=PendingApproval.Risk.choices, required=False, help_text="Risk level.")
    action = serializers.CharField(required=False, help_text="Action name, e.g. deploy_release.")
    agent = serializers.CharField(required=False, help_text="Agent slug, e.g. demo-agent.")


class RejectSerializer(serializers.Serializer[Any]):
    """The optional body of ``reject``: why, told to the model and kept in the audit log."""

    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class DecisionSerializer(serializers.Serializer[Any]):
    """200: the decision was taken here, and ``result`` is what the service returned."""

    execution_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["approved", "rejected"])
    result = serializers.JSONField(
        help_text="approve: the action's output (any JSON); reject: {status, executionId, action, reason}."
    )


class DecisionErrorSerializer(serializers.Serializer[Any]):
    """409: nothing was decided here (already decided elsewhere, never existed, or the action is gone)."""

    execution_id = serializers.CharField()
    status = serializers.ChoiceField(choices=["error"])
    error = serializers.CharField()
