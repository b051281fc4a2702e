"""HTTP views: ``get-messages`` (what ``useAgentChat`` fetches first) and the chat pages.

Every address is read in the logged-in user's namespace (``registry.resolve``); staff add
``?owner=<username>`` to reach another user's conversation.
"""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_POST

from . import conversations, llm, registry, transcript
from .errors import AgentAccessError
from .errors import PermissionDenied as AgentPermissionDenied


def owner_of(request: HttpRequest) -> str | None:
    """The ``owner`` query parameter: None when absent, ``""`` when empty (the global namespace)."""
    return request.GET.get(registry.OWNER_PARAMETER)


@require_GET
def get_messages(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """``GET /agents/<slug>/<name>/get-messages``: the persisted transcript, in order (404: no such conversation)."""
    try:
        instance = registry.find_instance(slug, name, request.user, owner_of(request))
    except AgentAccessError as exc:
        return JsonResponse({"error": str(exc)}, status=exc.http_status)
    return JsonResponse(transcript.load(instance), safe=False)


@login_required
def instance_list(request: HttpRequest) -> HttpResponse:
    """The user's conversations (and those of shared agents), and a form to start a new one."""
    return render(request, "agents_app/instance_list.html", {
        "instances": conversations.visible_to(request.user),
        "agent_slugs": sorted(registry.agent_classes()),
    })


@login_required
@require_POST
def new_chat(request: HttpRequest) -> HttpResponse:
    """"New conversation": one with a fresh name, or the conversation named in the form (made if new)."""
    slug = request.POST.get("slug", "")
    name = request.POST.get("name", "").strip()
    try:
        instance = (registry.open_instance(slug, name, request.user) if name
                    else conversations.create(slug, request.user))
    except AgentAccessError as exc:
        raise Http404(str(exc)) from exc
    return redirect("agents_app:chat", slug=instance.slug, name=instance.name)


@login_required
def chat(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """The chat page of one instance; its JS client speaks the WebSocket protocol."""
    owner = owner_of(request)
    try:
        instance = registry.open_instance(slug, name, request.user, owner)
    except AgentPermissionDenied as exc:
        raise PermissionDenied(str(exc)) from exc
    except AgentAccessError as exc:
        raise Http404(str(exc)) from exc
    agent = registry.agent_for(instance)
    return render(request, "agents_app/chat.html", {
        "instance": instance,
        # The page's socket and get-messages carry the same owner parameter as the page.
        "address_query": "" if owner is None else urlencode({registry.OWNER_PARAMETER: owner}),
        "demo_model": llm.is_demo(agent.get_model()),
        "starter_prompts": agent.starter_prompts,
    })
