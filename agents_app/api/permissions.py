"""Who may use the API: small policy classes delegating to the predicates the admin and chat use.

Each class holds no rule of its own, so the admin, the chat socket and the API cannot disagree
about who may approve an action or read a transcript.
"""

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from agents_app import approvals, registry
from agents_app.models import AgentInstance


class CanApproveActions(BasePermission):
    """The caller may see and decide paused actions: ``approvals.can_approve`` (the admin's rule)."""

    message = (
        'Seeing and deciding paused agent actions needs the "agents_app.approve_action" permission '
        "(Can approve or reject paused agent actions); ask an administrator to grant it."
    )

    def has_permission(self, request: Request, view: APIView) -> bool:
        return approvals.can_approve(request.user)


class IsInstanceOwnerOrStaff(BasePermission):
    """The caller may read this agent instance: ``registry.can_open``, the chat socket's own rule.

    That is the instance's owner or staff, or any authenticated user when the agent class is
    shared (``ChatAgent.shared``) or the instance has no owner.
    """

    message = "This agent instance belongs to another user."

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        assert isinstance(obj, AgentInstance)
        return registry.can_open(obj, request.user, registry.get_agent_class(obj.slug))
