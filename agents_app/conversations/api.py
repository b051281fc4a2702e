"""API views of conversations: the caller's list, a new one, one (read, delete), its transcript, a
message that starts a turn, and a turn's status.

Each resolves its address through ``registry`` (the chat socket's own rule: the caller's namespace,
staff another's with ``?owner=``) and makes one call into ``agents_app.conversations.service``.
"""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.exceptions import APIException, NotAuthenticated, NotFound, PermissionDenied
from rest_framework.generics import ListCreateAPIView
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app import errors, registry, transcript
from agents_app.conversations import service as conversations
from agents_app.models import AgentInstance, Turn

from ..api.permissions import AUTHENTICATION_CLASSES
from .serializers import (
    CreateInstanceSerializer,
    InstanceFilterSerializer,
    InstanceSerializer,
    SendMessageSerializer,
    TurnSerializer,
    WaitSerializer,
)

SLUG = OpenApiParameter("slug", OpenApiTypes.STR, OpenApiParameter.PATH, description="The agent's slug.",
                        examples=[OpenApiExample("The demo agent", value="demo-agent")])
NAME = OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH, description="The conversation's name.",
                        examples=[OpenApiExample("default", value="default")])
OLD_NAME = OpenApiParameter("name", OpenApiTypes.STR, OpenApiParameter.PATH, description="The conversation's name.",
                            examples=[OpenApiExample("An old one", value="old-notes")])
OWNER = OpenApiParameter(
    registry.OWNER_PARAMETER, OpenApiTypes.STR, required=False,
    description="Staff only: whose conversation this is (a username; empty: the conversations that belong to "
                "nobody). Others leave it out, or give their own username.",
)
NOT_FOUND = OpenApiResponse(description="No such agent, conversation or owner.")
FORBIDDEN = OpenApiResponse(description="`owner` names another user's conversation and the caller is not staff.")
INSTANCE_EXAMPLE = OpenApiExample("A conversation", value={
    "agent": "demo-agent", "name": "default", "owner": "alice",
    "created_at": "2026-01-31T09:12:00Z", "updated_at": "2026-01-31T09:15:42Z",
    "url": "http://127.0.0.1:8000/api/agents/demo-agent/default/",
    "chat_url": "http://127.0.0.1:8000/chat/demo-agent/default/", "websocket_path": "/agents/demo-agent/default",
}, response_only=True)
REPLY = {"id": "fQ3kR8sLm2XvB1tN", "role": "assistant",
         "parts": [{"type": "step-start"}, {"type": "text", "text": "(demo model, offline) You said: Hello",
                                            "state": "done"}]}
TURN_EXAMPLE = {"request_id": "Xq3mZ9aB", "status": "completed", "kind": "chat", "error": "",
                "created_at": "2026-01-31T09:15:40Z", "started_at": "2026-01-31T09:15:40Z",
                "finished_at": "2026-01-31T09:15:41Z",
                "url": "http://127.0.0.1:8000/api/agents/demo-agent/default/turns/Xq3mZ9aB/", "reply": REPLY}


def api_error(exc: errors.AgentAccessError) -> APIException:
    """The API's answer to a refused address: 401, 403, or 404 (an unknown agent, name or owner)."""
    if isinstance(exc, errors.NotAuthenticated):
        return NotAuthenticated(str(exc))
    if isinstance(exc, errors.PermissionDenied):
        return PermissionDenied(str(exc))
    return NotFound(str(exc))


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class ConversationView(APIView):
    """A view of one conversation, addressed by ``<slug>/<name>`` (and ``?owner=`` for staff)."""

    authentication_classes = AUTHENTICATION_CLASSES
    permission_classes = [IsAuthenticated]

    def get_instance(self, slug: str, name: str, *, create: bool = False) -> AgentInstance:
        """The existing instance the address names for the caller: reading is not opening.

        ``create``: a message is being sent, and in the caller's own namespace (or a shared
        agent's) it makes the conversation, as a first message on the socket does.
        """
        find = registry.open_instance if create else registry.find_instance
        try:
            return find(slug, name, self.request.user, self.request.query_params.get(registry.OWNER_PARAMETER))
        except errors.AgentAccessError as exc:
            raise api_error(exc) from exc


class RecentFirstCursorPagination(CursorPagination):
    """The most recently changed conversations first, 50 a page, without a ``COUNT(*)``."""

    page_size = 50
    ordering = "-updated_at"


class InstanceListView(ListCreateAPIView):
    authentication_classes = AUTHENTICATION_CLASSES
    permission_classes = [IsAuthenticated]
    serializer_class = InstanceSerializer
    pagination_class = RecentFirstCursorPagination

    def get_queryset(self) -> QuerySet[AgentInstance]:
        queryset = conversations.visible_to(self.request.user)
        filters = InstanceFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        agent = filters.validated_data.get("agent")
        return queryset.filter(slug=agent) if agent else queryset

    @extend_schema(
        summary="Your conversations, most recent first",
        description="Your own conversations and those of shared agents, 50 a page (follow `next`).",
        operation_id="instances_list", parameters=[InstanceFilterSerializer], examples=[INSTANCE_EXAMPLE],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        summary="Start a conversation",
        description="A new conversation with an agent, in your namespace (a shared agent's: everyone's). Give a "
                    "`name`, or leave it out for a fresh one.",
        operation_id="instances_create", request=CreateInstanceSerializer,
        responses={201: InstanceSerializer, 400: OpenApiResponse(description="Unknown agent or invalid name."),
                   409: OpenApiResponse(description="You already have a conversation of that name.")},
        examples=[OpenApiExample("A named one", value={"agent": "demo-agent", "name": "planning"},
                                 request_only=True), INSTANCE_EXAMPLE],
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = CreateInstanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            instance = conversations.create(body.validated_data["agent"], request.user, body.validated_data.get("name"))
        except errors.ConversationConflict as exc:
            raise Conflict(str(exc)) from exc
        data = InstanceSerializer(instance, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED, headers={"Location": data["url"]})


class InstanceView(ConversationView):
    @extend_schema(summary="One conversation", description="The conversation at this address.",
                   operation_id="instance_retrieve", parameters=[SLUG, NAME, OWNER], examples=[INSTANCE_EXAMPLE],
                   responses={200: InstanceSerializer, 403: FORBIDDEN, 404: NOT_FOUND})
    def get(self, request: Request, slug: str, name: str) -> Response:
        return Response(InstanceSerializer(self.get_instance(slug, name), context={"request": request}).data)

    @extend_schema(
        summary="Delete your conversation",
        description="Deletes the conversation with its transcript, turns and parked actions. Only its owner may; "
                    "not while a reply is queued or running (stop it first).",
        operation_id="instance_destroy", parameters=[SLUG, OLD_NAME, OWNER],
        responses={204: None, 403: OpenApiResponse(description="Not your conversation (or a shared one)."),
                   404: NOT_FOUND, 409: OpenApiResponse(description="A reply is still queued or running.")},
    )
    def delete(self, request: Request, slug: str, name: str) -> Response:
        instance = self.get_instance(slug, name)
        try:
            conversations.delete(instance, request.user)
        except errors.PermissionDenied as exc:
            raise PermissionDenied(str(exc)) from exc
        except errors.ConversationConflict as exc:
            raise Conflict(str(exc)) from exc
        return Response(status=status.HTTP_204_NO_CONTENT)


class InstanceMessagesView(ConversationView):
    @extend_schema(
        summary="The transcript (UIMessages in order)",
        description="The conversation's messages as the chat client gets them from `get-messages`.",
        operation_id="agents_messages_list", parameters=[SLUG, NAME, OWNER],
        responses={
            200: OpenApiResponse({"type": "array", "items": {"type": "object", "additionalProperties": True}},
                                 "The UIMessages, oldest first.",
                                 examples=[OpenApiExample("Two messages", value=[
                                     {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hello"}]},
                                     REPLY])]),
            403: FORBIDDEN, 404: NOT_FOUND,
        },
    )
    def get(self, request: Request, slug: str, name: str) -> Response:
        return Response(transcript.load(self.get_instance(slug, name)))

    @extend_schema(
        summary="Send a message",
        description="Adds a user message and starts the turn that answers it (the first message to a name of "
                    "yours makes that conversation); every open chat of the conversation "
                    "sees the reply stream. Answers `202` with the turn (follow its `url`), or with `wait=true` "
                    "`200` once the reply is complete, with the reply (`202` if it is still running after "
                    "`AGENT_API_WAIT_TIMEOUT`, 30 s by default).",
        operation_id="agents_messages_create", parameters=[SLUG, NAME, OWNER, WaitSerializer],
        request=SendMessageSerializer,
        responses={200: OpenApiResponse(TurnSerializer, "The turn has finished; `reply` is its answer."),
                   202: OpenApiResponse(TurnSerializer, "The turn is queued or running."),
                   403: FORBIDDEN, 404: NOT_FOUND,
                   409: OpenApiResponse(description="A reply is running and this agent drops messages sent "
                                                    "meanwhile (`message_concurrency = \"drop\"`).")},
        examples=[OpenApiExample("A message", value={"text": "Hello"}, request_only=True),
                  OpenApiExample("The finished turn (wait=true)", value=TURN_EXAMPLE, status_codes=["200"],
                                 response_only=True),
                  OpenApiExample("The queued turn", value={**TURN_EXAMPLE, "status": "queued", "started_at": None,
                                                           "finished_at": None, "reply": None},
                                 status_codes=["202"], response_only=True)],
    )
    def post(self, request: Request, slug: str, name: str) -> Response:
        body = SendMessageSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        options = WaitSerializer(data=request.query_params)
        options.is_valid(raise_exception=True)
        instance = self.get_instance(slug, name, create=True)  # bad input (400 above) makes nothing
        try:
            turn = conversations.send_message(instance, body.validated_data["text"], request.user)
        except errors.ConversationConflict as exc:
            raise Conflict(str(exc)) from exc
        if options.validated_data["wait"]:
            turn = conversations.wait(turn)
        data = TurnSerializer(turn, context={"request": request}).data
        done = turn.is_finished and options.validated_data["wait"]
        return Response(data, status=status.HTTP_200_OK if done else status.HTTP_202_ACCEPTED,
                        headers={"Location": data["url"]})


class TurnView(ConversationView):
    @extend_schema(
        summary="A turn's status",
        description="Where the turn that answers a message stands (`queued`, `running`, `completed`, `error`, "
                    "`aborted`, `skipped`), and its reply once it has finished.",
        operation_id="agents_turns_retrieve",
        parameters=[SLUG, NAME, OWNER, OpenApiParameter("request_id", OpenApiTypes.STR, OpenApiParameter.PATH,
                                                         description="The turn's request id, as sending gave it.")],
        responses={200: TurnSerializer, 403: FORBIDDEN, 404: NOT_FOUND},
        examples=[OpenApiExample("A finished turn", value=TURN_EXAMPLE, response_only=True)],
    )
    def get(self, request: Request, slug: str, name: str, request_id: str) -> Response:
        instance = self.get_instance(slug, name)
        turn = Turn.objects.select_related("instance").filter(instance=instance, request_id=request_id).first()
        if turn is None:
            raise NotFound(f"There is no turn {request_id!r} in this conversation")
        return Response(TurnSerializer(turn, context={"request": request}).data)
