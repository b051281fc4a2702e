"""``GET /api/usage/``: model usage (turns, requests, tokens, cost) over a range of days, in total
and grouped by day, user, agent or model. Everyone sees their own usage; staff see everyone's."""

from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..api.permissions import AUTHENTICATION_CLASSES
from ..models import TurnUsage
from . import service
from .serializers import UsageFilterSerializer, UsageReportSerializer

SUMS_EXAMPLE = {
    "turns": 12,
    "requests": 15,
    "input_tokens": 5400,
    "output_tokens": 1320,
    "total_tokens": 6720,
    "cost": "0.001602",
    "refused": 1,
}


class UsageView(APIView):
    authentication_classes = AUTHENTICATION_CLASSES
    permission_classes = [IsAuthenticated]

    @extend_schema(
        summary="Model usage by day, user, agent or model",
        description="Sums of the turns' model usage over `since`..`until` (UTC days, at most 366), in total and one "
        "row per group. Turns refused by a quota count in `refused`. Staff see every user's usage and "
        "may narrow it with `user`; others see their own.",
        parameters=[UsageFilterSerializer],
        responses={
            200: UsageReportSerializer,
            400: OpenApiResponse(description="A bad date, range or group."),
            403: OpenApiResponse(description="`user` names another user and the caller is not staff."),
            404: OpenApiResponse(description="No such user."),
        },
        examples=[
            OpenApiExample(
                "By day",
                response_only=True,
                value={
                    "since": "2026-01-01",
                    "until": "2026-01-30",
                    "group_by": "day",
                    "totals": SUMS_EXAMPLE,
                    "groups": [{"key": "2026-01-30", **SUMS_EXAMPLE}],
                },
            )
        ],
    )
    def get(self, request: Request) -> Response:
        query = UsageFilterSerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        params: dict[str, Any] = query.validated_data
        rows = TurnUsage.objects.filter(day__gte=params["since"], day__lte=params["until"])
        if "agent" in params:
            rows = rows.filter(agent=params["agent"])
        user = request.user
        if "user" in params and params["user"] != user.get_username():
            if not user.is_staff:
                raise PermissionDenied("Only staff may see another user's usage.")
            user = get_user_model().objects.filter(username=params["user"]).first()
            if user is None:
                raise NotFound(f"No user {params['user']!r}.")
        if "user" in params or not request.user.is_staff:
            rows = rows.filter(user_id=user.pk)
        report = {
            "since": params["since"],
            "until": params["until"],
            "group_by": params["group_by"],
            "totals": service.totals(rows),
            "groups": service.grouped(rows, params["group_by"]),
        }
        return Response(UsageReportSerializer(report).data)
