"""HTTP views: ``get-messages`` (what ``useAgentChat`` fetches first) and the chat pages."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from . import llm, registry, transcript
from .errors import AgentAccessError
from .models import AgentInstance
from .protocol.naming import DEFAULT_INSTANCE_NAME


@require_GET
def get_messages(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """``GET /agents/<slug>/<name>/get-messages``: the persisted transcript, in order (404: no such conversation)."""
    try:
        instance = registry.find_instance(slug, name, request.user)
    except AgentAccessError as exc:
        return JsonResponse({"error": str(exc)}, status=exc.http_status)
    return JsonResponse(transcript.load(instance), safe=False)


@login_required
def instance_list(request: HttpRequest) -> HttpResponse:
    """The user's agent instances, and a form to open a new one."""
    instances = AgentInstance.objects.filter(owner=request.user).order_by("-updated_at")
    return render(request, "agents_app/instance_list.html", {
        "instances": instances,
        "agent_slugs": sorted(registry.agent_classes()),
    })


@login_required
@require_POST
def open_chat(request: HttpRequest) -> HttpResponse:
    slug = request.POST.get("slug", "")
    name = request.POST.get("name", "").strip() or DEFAULT_INSTANCE_NAME
    return redirect("agents_app:chat", slug=slug, name=name)


@login_required
def chat(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """The chat page of one instance; its JS client speaks the WebSocket protocol."""
    try:
        instance = registry.open_instance(slug, name, request.user)
    except AgentAccessError as exc:
        return HttpResponse(str(exc), status=exc.http_status, content_type="text/plain")
    return render(request, "agents_app/chat.html", {
        "instance": instance,
        "demo_model": llm.is_demo(registry.agent_for(instance).get_model()),
    })
