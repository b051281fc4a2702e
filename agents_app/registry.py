"""Which agent classes the site serves, by slug, and which conversation an address names for whom."""

import functools
import re
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.utils.module_loading import import_string

from . import conf
from .agent import ChatAgent
from .errors import AgentConfigurationError, NotAuthenticated, PermissionDenied, UnknownAgent, UnknownInstance
from .models import AgentInstance

# Instance names are path segments; keep them printable (no control characters, which PostgreSQL
# may refuse to compare) and short.
_NAME_RE = re.compile(r"[^/\s\x00-\x1f\x7f]{1,200}")


@functools.cache
def agent_classes() -> dict[str, type[ChatAgent]]:
    """Slug → class for every entry of ``AGENT_CLASSES`` (cleared when the setting changes).

    Raises:
        AgentConfigurationError: an entry cannot be imported, is not a ChatAgent, or two classes
            share a slug. The system checks report the same problems at startup.
    """
    classes: dict[str, type[ChatAgent]] = {}
    for path in conf.get("AGENT_CLASSES"):
        try:
            cls = import_string(path)
        except ImportError as exc:
            raise AgentConfigurationError(f"AGENT_CLASSES entry {path!r} cannot be imported: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, ChatAgent)):
            raise AgentConfigurationError(f"AGENT_CLASSES entry {path!r} is not a ChatAgent subclass")
        slug = cls.slug()
        if slug in classes:
            raise AgentConfigurationError(
                f"AGENT_CLASSES entries {path!r} and {classes[slug].__qualname__!r} share the slug {slug!r}"
            )
        classes[slug] = cls
    return classes


def valid_name(name: str) -> bool:
    """An instance name: 1 to 200 characters, no slash, no white space or control character."""
    return _NAME_RE.fullmatch(name) is not None


def get_agent_class(slug: str) -> type[ChatAgent]:
    try:
        return agent_classes()[slug]
    except KeyError:
        raise UnknownAgent(f"No agent is registered under {slug!r}") from None


def agent_for(instance: AgentInstance) -> ChatAgent:
    """A fresh agent object of the instance's class, outside any turn (tools, actions, model)."""
    return get_agent_class(instance.slug)(instance)


# The query parameter that addresses another user's namespace: staff open ``/agents/<slug>/<name>``
# (and the chat page, get-messages, the REST API) of user ``alice`` with ``?owner=alice``, and the
# global namespace (instances code made with ``aget(name)``) with an empty ``?owner=``.
OWNER_PARAMETER = "owner"


def resolve(slug: str, name: str, user: Any, owner: str | None = None) -> tuple[type[ChatAgent], Any]:
    """The agent class of ``slug`` and the owner of the namespace ``name`` is read in, for ``user``.

    The one access rule of conversations (chat socket, pages, REST API). The namespace is:

    * a shared class's: the global one (owner None), for every logged-in user (``owner`` has no
      meaning there and is ignored);
    * otherwise ``user``'s own, unless ``owner`` (the ``owner`` query parameter, None when absent)
      names another: a username (that user's namespace) or ``""`` (the global namespace). Only
      staff may name another namespace than their own.

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied, UnknownInstance: see ``errors``.
    """
    agent_class = get_agent_class(slug)
    if not getattr(user, "is_authenticated", False):
        raise NotAuthenticated("Log in to talk to an agent")
    if not valid_name(name):
        raise UnknownAgent(f"Invalid instance name {name!r}")
    if agent_class.shared:
        return agent_class, None
    if owner is None or owner == user.get_username():
        return agent_class, user
    if not user.is_staff:
        raise PermissionDenied("Only staff may open another user's conversation")
    if owner == "":
        return agent_class, None
    if "\x00" in owner:  # no username has one, and PostgreSQL cannot compare it
        raise UnknownInstance(f"There is no user {owner!r}")
    try:
        return agent_class, get_user_model()._default_manager.get_by_natural_key(owner)
    except ObjectDoesNotExist:
        raise UnknownInstance(f"There is no user {owner!r}") from None


def open_instance(slug: str, name: str, user: Any, owner: str | None = None) -> AgentInstance:
    """The instance the address names (see ``resolve``), made on first use in the caller's namespace.

    Staff reading another namespace find what is there; their visit makes nothing.

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied, UnknownInstance: see ``errors``.
    """
    agent_class, namespace = resolve(slug, name, user, owner)
    if namespace is user or agent_class.shared:
        instance, _ = AgentInstance.objects.get_or_create(slug=slug, name=name, owner=namespace)
        return instance
    return _existing(slug, name, namespace)


def find_instance(slug: str, name: str, user: Any, owner: str | None = None) -> AgentInstance:
    """The existing instance the address names (see ``resolve``): reading is not opening (REST API).

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied, UnknownInstance: see ``errors``.
    """
    _, namespace = resolve(slug, name, user, owner)
    return _existing(slug, name, namespace)


def _existing(slug: str, name: str, owner: Any) -> AgentInstance:
    try:
        return AgentInstance.objects.select_related("owner").get(slug=slug, name=name, owner=owner)
    except AgentInstance.DoesNotExist:
        raise UnknownInstance(f"There is no conversation {slug}/{name}" + _whose(owner)) from None


def _whose(owner: Any) -> str:
    return f" of {owner.get_username()}" if owner is not None else " without an owner"


def owner_parameter(instance: AgentInstance) -> str | None:
    """The ``owner`` query value by which staff address ``instance``; None when it needs none (shared)."""
    agent_class = agent_classes().get(instance.slug)
    if agent_class is not None and agent_class.shared:
        return None
    return instance.owner.get_username() if instance.owner is not None else ""


def staff_query(instance: AgentInstance) -> str:
    """The query string by which staff address ``instance`` (``?owner=alice``, ``?owner=``, or "")."""
    owner = owner_parameter(instance)
    return "" if owner is None else "?" + urlencode({OWNER_PARAMETER: owner})
