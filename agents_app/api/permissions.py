"""Who may use the API: small policy classes delegating to the predicates the admin and chat use.

Each class holds no rule of its own, so the admin, the chat socket and the API cannot disagree
about who may approve an action. Who may read a conversation is decided where its address is
resolved (``registry.resolve``), for the API as for the chat socket.
"""

from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from agents_app import approvals

# How callers prove who they are: a token (``Authorization: Token <key>``) or the browser's session.
# Token first: DRF answers an anonymous request with the first class's ``WWW-Authenticate``
# header, and session authentication has none, which would turn "log in" (401) into 403.
AUTHENTICATION_CLASSES = [TokenAuthentication, SessionAuthentication]


class CanApproveActions(BasePermission):
    """The caller may see and decide paused actions: ``approvals.can_approve`` (the admin's rule)."""

    message = (
        'Seeing and deciding paused agent actions needs the "agents_app.approve_action" permission '
        "(Can approve or reject paused agent actions); ask an administrator to grant it."
    )

    def has_permission(self, request: Request, view: APIView) -> bool:
        return approvals.can_approve(request.user)
