"""The admin's Destroy button on a conversation: a confirmation page, then ``lifecycle.service.destroy``.

Staff with the "Can delete agent instance" permission (superusers have it) see the button; the
page lists what goes (messages, turns, sub-agents, schedules, ledger rows) and nothing is deleted
before its own POST (``post=yes``), as Django's delete confirmation.
"""

from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from ..models import AgentInstance, LedgerEntry
from . import service

TEMPLATE = "admin/agents_app/agentinstance/destroy_confirmation.html"


def what_goes(instance: AgentInstance) -> dict[str, int]:
    """What destroying ``instance`` deletes, counted for the confirmation page."""
    family = service.family(instance)
    pks = [member.pk for member in family]
    return {
        "messages": sum(member.messages.count() for member in family),
        "turns": sum(member.turns.count() for member in family),
        "sub_agents": len(family) - 1,
        "schedules": sum(member.schedules.count() for member in family),
        "ledger_rows": LedgerEntry.objects.filter(scope__in=[str(pk) for pk in pks]).count(),
    }


class DestroyMixin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Adds ``<pk>/destroy/`` to the instance admin (the change form links to it)."""

    def has_destroy_permission(self, request: HttpRequest) -> bool:
        user: Any = request.user
        return bool(user.is_active and user.is_staff and user.has_perm("agents_app.delete_agentinstance"))

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_destroy"
        return [
            path("<path:object_id>/destroy/", self.admin_site.admin_view(self.destroy_view), name=name),
            *super().get_urls(),
        ]

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: AgentInstance | None = None,
    ) -> Any:
        context["can_destroy"] = obj is not None and self.has_destroy_permission(request)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def destroy_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what would be deleted, and a confirm button. POST with ``post=yes``: destroy it."""
        if not self.has_destroy_permission(request):
            raise PermissionDenied
        instance = self.get_object(request, unquote(object_id))
        if instance is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
        if request.method == "POST" and request.POST.get("post") == "yes":
            removed = async_to_sync(service.destroy)(instance)
            self.message_user(
                request,
                f"Destroyed {instance.slug}/{instance.name}: {removed.messages} messages, "
                f"{removed.turns} turns, {removed.ledger_rows} ledger rows deleted.",
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "object": instance,
            "title": "Destroy this conversation?",
            "counts": what_goes(instance),
        }
        return TemplateResponse(request, TEMPLATE, context)
