"""The API root: where the API's collections and its documentation are.

Each feature's endpoints live in its package (``approvals/api.py``, ``conversations/api.py``,
``schedules/api.py``, ``usage/api.py``, ``mcp/api.py``); ``api/urls.py`` mounts them.
"""

from django.urls import reverse
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .permissions import AUTHENTICATION_CLASSES

# The API root's links: name → URL name.
ROOT_LINKS = {
    "instances": "api:instances",
    "approvals": "api:approval-list",
    "usage": "api:usage",
    "schema": "schema",
    "docs": "swagger-ui",
    "redoc": "redoc",
}


class ApiRootView(APIView):
    """``/api/``: where the API's collections and its documentation are."""

    authentication_classes = AUTHENTICATION_CLASSES
    permission_classes = [AllowAny]

    @extend_schema(
        summary="The API's links",
        description="Where to start: your conversations, the approvals queue (staff), model usage, the OpenAPI "
                    "schema and its documentation (Swagger UI and Redoc). Needs no login.",
        operation_id="api_root",
        responses={200: OpenApiResponse({"type": "object", "additionalProperties": {"type": "string",
                                                                                    "format": "uri"}})},
        examples=[OpenApiExample("The links", value={
            "instances": "http://127.0.0.1:8000/api/instances/", "approvals": "http://127.0.0.1:8000/api/approvals/",
            "usage": "http://127.0.0.1:8000/api/usage/",
            "schema": "http://127.0.0.1:8000/api/schema/", "docs": "http://127.0.0.1:8000/api/docs/",
            "redoc": "http://127.0.0.1:8000/api/redoc/"})],
    )
    def get(self, request: Request) -> Response:
        return Response({name: request.build_absolute_uri(reverse(url)) for name, url in ROOT_LINKS.items()})
