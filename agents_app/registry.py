"""Which agent classes the site serves, by slug, and who may open which instance."""

import functools
import re
from typing import Any

from django.utils.module_loading import import_string

from . import conf
from .agent import ChatAgent
from .errors import AgentConfigurationError, NotAuthenticated, PermissionDenied, UnknownAgent, UnknownInstance
from .models import AgentInstance

# Instance names are path segments; keep them printable and short.
_NAME_RE = re.compile(r"^[^/\s]{1,200}$")


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


def get_agent_class(slug: str) -> type[ChatAgent]:
    try:
        return agent_classes()[slug]
    except KeyError:
        raise UnknownAgent(f"No agent is registered under {slug!r}") from None


def agent_for(instance: AgentInstance) -> ChatAgent:
    """A fresh agent object of the instance's class, outside any turn (tools, actions, model)."""
    return get_agent_class(instance.slug)(instance)


def can_open(instance: AgentInstance, user: Any, agent_class: type[ChatAgent]) -> bool:
    """The one access rule: the owner, staff, or anyone authenticated when the class is shared."""
    if not getattr(user, "is_authenticated", False):
        return False
    return bool(
        user.is_staff or agent_class.shared or instance.owner_id is None or instance.owner_id == user.pk
    )


def open_instance(slug: str, name: str, user: Any) -> AgentInstance:
    """The instance ``slug/name`` for ``user``, created (owned by them) on first use.

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied: see ``errors``.
    """
    agent_class = _checked(slug, name, user)
    instance, _ = AgentInstance.objects.get_or_create(slug=slug, name=name, defaults={"owner": user})
    return _allowed(instance, user, agent_class)


def find_instance(slug: str, name: str, user: Any) -> AgentInstance:
    """The existing instance ``slug/name``: reading is not opening, so a name nobody opened is not taken.

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied, UnknownInstance: see ``errors``.
    """
    agent_class = _checked(slug, name, user)
    instance = AgentInstance.objects.filter(slug=slug, name=name).first()
    if instance is None:
        raise UnknownInstance(f"There is no conversation {slug}/{name}")
    return _allowed(instance, user, agent_class)


def _checked(slug: str, name: str, user: Any) -> type[ChatAgent]:
    agent_class = get_agent_class(slug)
    if not getattr(user, "is_authenticated", False):
        raise NotAuthenticated("Log in to talk to an agent")
    if not _NAME_RE.match(name):
        raise UnknownAgent(f"Invalid instance name {name!r}")
    return agent_class


def _allowed(instance: AgentInstance, user: Any, agent_class: type[ChatAgent]) -> AgentInstance:
    if not can_open(instance, user, agent_class):
        raise PermissionDenied(f"Agent instance {instance.slug}/{instance.name} belongs to another user")
    return instance
