"""An instance's MCP servers over the REST API: list them with their state, add and remove runtime ones.

The address is the conversation's (``/api/agents/<slug>/<name>/mcp-servers/``, ``?owner=`` for
staff), resolved as every conversation view resolves it. Whoever may read the conversation may
list its servers (its chat socket sends them the same in ``cf_agent_mcp_servers``); adding and
removing need ``agents_app.manage_mcp_servers``. Each operation is one call into
``agents_app.mcp.service``, which stores the change and sends the new state to every connection.
"""

from typing import Any

from asgiref.sync import async_to_sync
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ..conversations.api import FORBIDDEN, NAME, NOT_FOUND, OWNER, SLUG, Conflict, ConversationView
from ..models import AgentInstance
from . import service
from .serializers import AddMCPServerSerializer, MCPServerSerializer
from .servers import MCPConfigurationError

MANAGE_PERMISSION = "agents_app.manage_mcp_servers"
SERVER = OpenApiParameter("server", OpenApiTypes.STR, OpenApiParameter.PATH, description="The server's name.",
                          examples=[OpenApiExample("A runtime server", value="docs")])
SERVER_EXAMPLE = OpenApiExample("The demo MCP server, ready", value={
    "id": "demo-tools", "name": "demo-tools", "server_url": "http://127.0.0.1:8001/mcp", "source": "declared",
    "state": "ready", "error": None, "tool_count": 2, "tools": ["convert_units", "count_words"],
}, response_only=True)
NO_PERMISSION = OpenApiResponse(description="Adding and removing MCP servers needs the agents_app.manage_mcp_servers "
                                            "permission (or the conversation is another user's and you are not staff).")


class CanManageMCPServers(BasePermission):
    """Reading is for whoever may read the conversation; changing needs ``manage_mcp_servers``."""

    message = ('Adding and removing MCP servers needs the "agents_app.manage_mcp_servers" permission '
               "(Can add and remove the MCP servers of agent instances); ask an administrator to grant it.")

    def has_permission(self, request: Request, view: APIView) -> bool:
        return request.method in ("GET", "HEAD", "OPTIONS") or request.user.has_perm(MANAGE_PERMISSION)


def entries(instance: AgentInstance) -> list[dict[str, Any]]:
    """The instance's servers, declared first, in the API's shape (``MCPServerSerializer``)."""
    return [{
        "id": entry["id"], "name": entry["name"], "server_url": entry["server_url"],
        "source": "declared" if entry["declared"] else "runtime", "state": entry["state"], "error": entry["error"],
        "tool_count": len(entry["tools"]), "tools": [tool["name"] for tool in entry["tools"]],
    } for entry in service.list_servers(instance)]


class MCPServersOfConversation(ConversationView):
    """A view of one conversation's MCP servers: read by its readers, changed with the permission."""

    permission_classes = [IsAuthenticated, CanManageMCPServers]


class MCPServerListView(MCPServersOfConversation):
    @extend_schema(
        summary="The conversation's MCP servers",
        description="Every MCP server the conversation's turns use: those its agent declares, then those added at "
                    "runtime, each with its state, last error and tools.",
        operation_id="agents_mcp_servers_list", parameters=[SLUG, NAME, OWNER],
        responses={200: MCPServerSerializer(many=True), 403: FORBIDDEN, 404: NOT_FOUND}, examples=[SERVER_EXAMPLE],
    )
    def get(self, request: Request, slug: str, name: str) -> Response:
        return Response(MCPServerSerializer(entries(self.get_instance(slug, name)), many=True).data)

    @extend_schema(
        summary="Add an MCP server",
        description="Adds a streamable-HTTP (or SSE) MCP server to this conversation: every turn from the next one "
                    "on, on any process, connects to it and offers its tools; every open chat sees it at once "
                    "(`not-connected` until a turn connects). Needs `agents_app.manage_mcp_servers`.",
        operation_id="agents_mcp_servers_create", parameters=[SLUG, NAME, OWNER], request=AddMCPServerSerializer,
        responses={201: MCPServerSerializer, 400: OpenApiResponse(description="A bad name, URL or header reference."),
                   403: NO_PERMISSION, 404: NOT_FOUND,
                   409: OpenApiResponse(description="The conversation already has a server of that name.")},
        examples=[OpenApiExample("A server with a token", request_only=True, value={
            "name": "docs", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer env:DOCS_TOKEN"},
        }), SERVER_EXAMPLE],
    )
    def post(self, request: Request, slug: str, name: str) -> Response:
        body = AddMCPServerSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        instance = self.get_instance(slug, name, create=True)  # bad input (400 above) makes nothing
        try:
            async_to_sync(service.aadd_server)(
                instance, data["name"], data["url"], connect=False, headers=data.get("headers", {}),
                transport=data.get("transport"), tool_prefix=data.get("tool_prefix", ""),
                needs_approval=True if data["approve_all"] else data.get("needs_approval", []),
                created_by=request.user,
            )
        except service.MCPServerExists as exc:
            raise Conflict(str(exc)) from exc
        except MCPConfigurationError as exc:
            raise ValidationError({"detail": str(exc)}) from exc
        added = next(entry for entry in entries(instance) if entry["id"] == data["name"])
        return Response(MCPServerSerializer(added).data, status=status.HTTP_201_CREATED)


class MCPServerView(MCPServersOfConversation):
    @extend_schema(
        summary="Remove an MCP server",
        description="Removes a server added at runtime; turns stop using it and every open chat sees it go. A "
                    "server the agent declares in code cannot be removed here. Needs `agents_app.manage_mcp_servers`.",
        operation_id="agents_mcp_servers_destroy", parameters=[SLUG, NAME, OWNER, SERVER],
        responses={204: None, 403: NO_PERMISSION, 404: NOT_FOUND,
                   409: OpenApiResponse(description="The agent declares this server in code.")},
    )
    def delete(self, request: Request, slug: str, name: str, server: str) -> Response:
        instance = self.get_instance(slug, name)
        if async_to_sync(service.aremove_server)(instance, server):
            return Response(status=status.HTTP_204_NO_CONTENT)
        if any(declared.name == server for declared in service.declared(instance)):
            raise Conflict(f"{instance.slug} declares the MCP server {server!r} in code; it cannot be removed here")
        raise NotFound(f"This conversation has no MCP server {server!r}")
