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

from .. import llm, registry, transcript
from ..conversations import service as conversations
from ..errors import AgentAccessError
from ..errors import PermissionDenied as AgentPermissionDenied

# Sub-agents linked from a chat page (the newest conversations of an agent may have many).
SUB_AGENT_LINKS = 50


def owner_of(request: HttpRequest) -> str | None:
    """The ``owner`` query parameter: None when absent, ``""`` when empty (the global namespace)."""
    return request.GET.get(registry.OWNER_PARAMETER)


@require_GET
def get_messages(request: HttpRequest, slug: str, name: str, sub: str = "") -> HttpResponse:
    """``GET /agents/<slug>/<name>[/sub/<slug>/<name>...]/get-messages``: the persisted transcript, in order.

    Reading makes nothing. In the caller's own namespace every name reads as a conversation, empty
    until its first message makes it (the chat page loads this before that message); in a
    namespace staff only read (``?owner=``) a name without a row is 404.
    """
    try:
        instance = registry.locate(slug, name, request.user, owner_of(request), registry.parse_sub_path(sub))
    except AgentAccessError as exc:
        return JsonResponse({"error": str(exc)}, status=exc.http_status)
    return JsonResponse(transcript.load(instance) if instance.pk is not None else [], safe=False)


@login_required
def instance_list(request: HttpRequest) -> HttpResponse:
    """The conversations the user may open, grouped (``conversations.index_of``), and a form to
    start a new one."""
    return render(request, "agents_app/instance_list.html", {
        "index": conversations.index_of(request.user),
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
def chat(request: HttpRequest, slug: str, name: str, sub: str = "") -> HttpResponse:
    """The chat page of one instance (or sub-agent); its JS client speaks the WebSocket protocol.

    Viewing stores nothing: a new address shows an empty chat, and its first message makes it.
    """
    owner = owner_of(request)
    try:
        instance = registry.locate(slug, name, request.user, owner, registry.parse_sub_path(sub))
    except AgentPermissionDenied as exc:
        raise PermissionDenied(str(exc)) from exc
    except AgentAccessError as exc:
        raise Http404(str(exc)) from exc
    agent = registry.agent_for(instance)
    address_query = "" if owner is None else urlencode({registry.OWNER_PARAMETER: owner})
    ancestors = []
    parent = instance.parent
    while parent is not None:
        ancestors.insert(0, (parent, registry.chat_url(parent, address_query)))
        parent = parent.parent
    return render(request, "agents_app/chat.html", {
        "instance": instance,
        # The page's socket and get-messages carry the same owner parameter as the page.
        "address_query": address_query,
        "ancestors": ancestors,
        "sub_agents": [(child, registry.chat_url(child, address_query))
                       for child in (instance.children.order_by("slug", "name")[:SUB_AGENT_LINKS]
                                     if instance.pk is not None else ())],
        "demo_model": llm.is_demo(agent.get_model()),
        "starter_prompts": agent.starter_prompts,
    })
