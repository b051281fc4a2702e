"""Pending approvals over the REST API: list, retrieve, approve, reject.

Approve and reject make exactly one call, ``service.approve_execution`` / ``reject_execution``,
the entry point the admin and the chat page use too. The service claims the pending row by
deleting it, so of any number of concurrent approvers exactly one runs the action; every other
one gets its "no longer pending" error object, which becomes 409 here.
"""

from typing import Any

from asgiref.sync import async_to_sync
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..api.pagination import OldestFirstCursorPagination
from ..api.permissions import AUTHENTICATION_CLASSES
from ..models import PendingApproval
from . import service as approvals
from .serializers import (
    ApprovalFilterSerializer,
    DecisionErrorSerializer,
    DecisionSerializer,
    PendingApprovalSerializer,
    RejectSerializer,
)

CONFLICT_DESCRIPTION = (
    "Nothing was decided by this request: the execution was already approved or rejected "
    "(elsewhere, or by an earlier request; a second approve never runs the action again), never "
    "existed (indistinguishable from a decided one by design: rows exist only while pending), or "
    "its action is no longer registered (then the approval is consumed and recorded, and nothing ran)."
)


class CanApproveActions(BasePermission):
    """The caller may see and decide paused actions: ``approvals.can_approve`` (the admin's rule)."""

    message = (
        'Seeing and deciding paused agent actions needs the "agents_app.approve_action" permission '
        "(Can approve or reject paused agent actions); ask an administrator to grant it."
    )

    def has_permission(self, request: Request, view: APIView) -> bool:
        return approvals.can_approve(request.user)


@extend_schema_view(
    list=extend_schema(
        summary="Pending approvals, oldest first",
        description="Durable-pause action calls waiting for a human, 50 a page (follow `next`); a call leaves the "
                    "list once decided. Needs the `agents_app.approve_action` permission.",
        parameters=[ApprovalFilterSerializer],
    ),
    retrieve=extend_schema(summary="One pending approval",
                           description="One parked call; 404 once it has been decided (or never existed)."),
)
class PendingApprovalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Durable-pause action calls waiting for a human; a row leaves the list once decided."""

    serializer_class = PendingApprovalSerializer
    authentication_classes = AUTHENTICATION_CLASSES
    permission_classes = [IsAuthenticated, CanApproveActions]
    pagination_class = OldestFirstCursorPagination
    lookup_field = "execution_id"
    lookup_value_regex = "[^/]+"

    def get_queryset(self) -> QuerySet[PendingApproval]:
        queryset = PendingApproval.objects.select_related("instance__owner", "requested_by")
        if self.action != "list":
            return queryset
        filters = ApprovalFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        lookups = {"risk": "risk", "action": "action_name", "agent": "agent"}
        return queryset.filter(**{lookups[key]: value for key, value in filters.validated_data.items()})

    @extend_schema(
        summary="Approve: run the paused action once",
        description="Runs the paused action (once, whoever else approves at the same time) and continues the "
                    "conversation: the action's output replaces the paused envelope in the transcript and a "
                    "continuation turn lets the model react to it.",
        operation_id="approvals_approve",
        request=None,
        responses={200: DecisionSerializer, 409: OpenApiResponse(DecisionErrorSerializer, CONFLICT_DESCRIPTION)},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, execution_id: str) -> Response:
        """Run the paused action (once, whoever else approves at the same time) and continue the chat.

        The action's output replaces the paused envelope in the transcript and a continuation
        turn is queued, so the model reacts to it.
        """
        result = async_to_sync(approvals.approve_execution)(execution_id, actor=request.user)
        return _decision(execution_id, "approved", result)

    @extend_schema(
        summary="Reject: tell the model the action was not run",
        description="Decides not to run the paused action; the model is told so, with the optional `reason`.",
        operation_id="approvals_reject",
        request=RejectSerializer,
        responses={200: DecisionSerializer, 409: OpenApiResponse(DecisionErrorSerializer, CONFLICT_DESCRIPTION)},
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, execution_id: str) -> Response:
        """Decide not to run the paused action; the model is told so, with the optional reason."""
        body = RejectSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reason = body.validated_data.get("reason") or None
        result = async_to_sync(approvals.reject_execution)(execution_id, reason, actor=request.user)
        return _decision(execution_id, "rejected", result)


def _decision(execution_id: str, decided: str, result: Any) -> Response:
    """200 with the service's return value, or 409 when the service says nothing was decided."""
    if approvals.is_error(result):
        return Response(
            {"execution_id": execution_id, "status": "error", "error": result["error"]},
            status=status.HTTP_409_CONFLICT,
        )
    return Response({"execution_id": execution_id, "status": decided, "result": result})
