"""Which agent classes the site serves, by slug, and which conversation an address names for whom."""

import asyncio
import functools
import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from django.db import transaction
from django.urls import reverse
from django.utils.module_loading import import_string

from . import conf, database, statements
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


def open_instance(slug: str, name: str, user: Any, owner: str | None = None,
                  sub: Sequence[tuple[str, str]] = ()) -> AgentInstance:
    """The instance the address names (see ``resolve``), made now if it does not exist yet.

    For what is about to be written to (a message sent over HTTP, "New conversation"): pages and
    sockets only ``locate`` the instance, so that looking at an address stores nothing.

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied, UnknownInstance: see ``errors``.
    """
    return materialize(locate(slug, name, user, owner, sub))


def locate(slug: str, name: str, user: Any, owner: str | None = None,
           sub: Sequence[tuple[str, str]] = ()) -> AgentInstance:
    """The instance the address names (see ``resolve``): the stored one, or, in the caller's own
    namespace (or a shared class's), an unsaved one (``pk`` None, with unsaved ancestors where
    they are missing too) that its first message makes (``materialize``).

    ``sub``: the ``(slug, name)`` steps from that instance down to one of its sub-agents (the
    address's ``/sub/<slug>/<name>`` segments, ``parse_sub_path``). Staff reading another
    namespace find only what is there.

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied, UnknownInstance: see ``errors``.
    """
    agent_class, namespace = resolve(slug, name, user, owner)
    if not (namespace is user or agent_class.shared):
        return find_instance(slug, name, user, owner, sub)
    instance = _stored(slug, name, namespace) or AgentInstance(slug=slug, name=name, owner=namespace)
    for child_slug, child_name in sub:
        child = None
        if instance.pk is not None:
            child = _existing_child(instance, child_slug, child_name)
        instance = child or AgentInstance(parent=instance, slug=child_slug, name=child_name, owner=instance.owner)
    return instance


def materialize(instance: AgentInstance) -> AgentInstance:
    """``instance`` stored: an unsaved one from ``locate`` is made, with its missing ancestors.

    Returns the stored row (a new object when it was unsaved; another request may have made the
    same address meanwhile, and then that one is returned). Connections that wait on the address
    (``pending_group``) are told once the row is committed.
    """
    stored, created = _materialized(instance)
    _announce_on_commit(created)
    return stored


async def amaterialize(instance: AgentInstance) -> AgentInstance:
    """``materialize`` from the event loop: the database thread makes the rows and the loop tells
    the waiting connections. ``materialize`` there would hold that thread, which every connection's
    database work shares, through the loop's publication."""
    return await _made_and_announced(functools.partial(_made_now, instance))


async def asub_instance(parent: AgentInstance, slug: str, name: str) -> AgentInstance:
    """``sub_instance(parent, slug, name)`` from the event loop, as ``amaterialize``."""
    return await _made_and_announced(lambda: _made_now(_child(parent, slug, name)))


async def _made_and_announced(make: Callable[[], tuple[AgentInstance, list[AgentInstance]]]) -> AgentInstance:
    # A cancelled caller leaves the making running to the announcement, as on the database thread,
    # where both ran.
    return await database.to_the_end(asyncio.ensure_future(_make_then_announce(make)))


async def _make_then_announce(make: Callable[[], tuple[AgentInstance, list[AgentInstance]]]) -> AgentInstance:
    stored, created = await database_sync_to_async(make)()
    for row in created:
        await announce(row)
    return stored


def _made_now(instance: AgentInstance) -> tuple[AgentInstance, list[AgentInstance]]:
    """``_materialized``, and the rows it made that are committed already, for the loop to
    announce; in a caller's transaction (reached through ``async_to_sync``) they are announced
    when it commits, as ``materialize`` does."""
    stored, created = _materialized(instance)
    if transaction.get_connection().in_atomic_block:
        _announce_on_commit(created)
        return stored, []
    return stored, created


def _announce_on_commit(rows: list[AgentInstance]) -> None:
    for row in rows:
        transaction.on_commit(functools.partial(async_to_sync(announce), row))


def make_in_transaction(instance: AgentInstance) -> tuple[AgentInstance, list[AgentInstance]]:
    """``instance`` stored in the caller's transaction, and the rows made for it (ancestors first),
    which the caller announces (``announce``) once that transaction has committed.

    For a first message that makes its conversation's row with its admission
    (``turns.submit_chat``): one write transaction where there were two.
    """
    assert transaction.get_connection().in_atomic_block, "the rows are announced after the caller's commit"
    return _materialized(instance)


def _materialized(instance: AgentInstance) -> tuple[AgentInstance, list[AgentInstance]]:
    """The stored row, and the rows made for it (ancestors first)."""
    if instance.pk is not None:
        return instance, []
    if instance.parent is None:
        made: list[AgentInstance] = []
        stored, created = _create_or_get(slug=instance.slug, name=instance.name, owner=instance.owner, parent=None)
    else:
        parent, made = _materialized(instance.parent)
        stored, created = _create_or_get(parent=parent, slug=instance.slug, name=instance.name,
                                         owner_id=parent.owner_id)
    return stored, [*made, stored] if created else made


def _create_or_get(**fields: Any) -> tuple[AgentInstance, bool]:
    """``get_or_create`` that tries the insert first: an unsaved instance's address had no row when
    it was read a moment ago, and the ORM's look before its insert cost a new conversation's first
    message a query. Another request that made the row meanwhile leaves the insert writing nothing,
    and that row is read (``created`` False), as ``get_or_create`` reads it after losing the same
    race. The insert is one statement that cannot fail on the address (``statements.insert_unless_taken``):
    no savepoint, which the ORM's insert needed to survive the race inside a caller's transaction."""
    row = AgentInstance(**fields)
    if statements.insert_unless_taken(row):
        return row, True
    lookup = {key: value for key, value in fields.items() if key != "owner_id"}
    return AgentInstance.objects.get(**lookup), False


def pending_group(instance: AgentInstance) -> str:
    """The channel-layer group of the connections open on an address with no row yet.

    Keyed by owner and address (a digest: group names are short and ASCII), so that the socket of
    a second tab learns of the row the first message made, on any process (``CREATED_EVENT``).
    """
    key = f"{instance.owner_id or ''}:{instance.address}"
    return "agent.new." + hashlib.sha256(key.encode()).hexdigest()[:40]


# The channel-layer event sent to ``pending_group`` with the new row's ``pk``.
CREATED_EVENT = "conversation.created"


# The waiting groups travel on the project's channel layer's shared topic (``group_add_shared``,
# ``group_send_shared``: no Redis command per group); another layer (the tests' in-memory one)
# keeps them as plain groups.


async def wait_for_row(instance: AgentInstance, channel: str) -> None:
    """``channel`` joins the group of ``instance``'s address, which has no row yet (``announce``)."""
    layer = get_channel_layer()
    await getattr(layer, "group_add_shared", layer.group_add)(pending_group(instance), channel)


async def stop_waiting(instance: AgentInstance, channel: str) -> None:
    """``channel`` leaves the group of ``instance``'s address (it follows the row, or it closed)."""
    await get_channel_layer().group_discard(pending_group(instance), channel)


async def announce(instance: AgentInstance) -> None:
    """Tell the connections waiting on ``instance``'s address that its row exists (committed)."""
    layer = get_channel_layer()
    if layer is not None:
        await getattr(layer, "group_send_shared", layer.group_send)(
            pending_group(instance), {"type": CREATED_EVENT, "pk": instance.pk})


def find_instance(slug: str, name: str, user: Any, owner: str | None = None,
                  sub: Sequence[tuple[str, str]] = ()) -> AgentInstance:
    """The existing instance the address names (see ``resolve``): reading is not opening (REST API).

    Raises:
        UnknownAgent, NotAuthenticated, PermissionDenied, UnknownInstance: see ``errors``.
    """
    _, namespace = resolve(slug, name, user, owner)
    instance = _existing(slug, name, namespace)
    for child_slug, child_name in sub:
        instance = sub_instance(instance, child_slug, child_name, create=False)
    return instance


# The literal segment between a parent's address and a sub-agent's (Cloudflare's ``SUB_PREFIX``).
SUB_SEGMENT = "sub"


def parse_sub_path(path: str) -> list[tuple[str, str]]:
    """``/sub/<slug>/<name>[/sub/<slug>/<name>...]`` (an address's tail, decoded as URL routes
    give it) as ``(slug, name)`` steps.

    Raises:
        UnknownInstance: the tail is not made of such triples.
    """
    parts = path.strip("/").split("/") if path.strip("/") else []
    if len(parts) % 3 or any(parts[i] != SUB_SEGMENT for i in range(0, len(parts), 3)):
        raise UnknownInstance(f"Invalid sub-agent address {path!r}")
    return [(parts[i + 1], parts[i + 2]) for i in range(0, len(parts), 3)]


def sub_instance(parent: AgentInstance, slug: str, name: str, *, create: bool = True) -> AgentInstance:
    """Sub-agent ``slug/name`` of ``parent``: made on first use (``create``) with the parent's owner.

    Its class must be served (``AGENT_CLASSES``), as every instance's: any process runs its turns.

    Raises:
        UnknownAgent: no class has that slug, or the name is invalid.
        UnknownInstance: it does not exist and ``create`` is false.
    """
    if create:
        return materialize(_child(parent, slug, name))
    child = _existing_child(parent, slug, name)
    if child is None:
        raise UnknownInstance(f"There is no sub-agent {slug}/{name} of {parent.address}")
    return child


def stored_since(instance: AgentInstance) -> AgentInstance | None:
    """The row of an unsaved instance's address if a request has made it since it was located
    (with its owner, as ``locate`` reads it); None while there is none."""
    if instance.pk is not None:
        return instance
    if instance.parent is None:
        return _stored(instance.slug, instance.name, instance.owner)
    parent = stored_since(instance.parent)
    return None if parent is None else _existing_child(parent, instance.slug, instance.name)


def _child(parent: AgentInstance, slug: str, name: str) -> AgentInstance:
    """Sub-agent ``slug/name`` of ``parent``: the stored one, or an unsaved one to ``materialize``."""
    return _existing_child(parent, slug, name) or AgentInstance(parent=parent, slug=slug, name=name)


def _existing_child(parent: AgentInstance, slug: str, name: str) -> AgentInstance | None:
    """Sub-agent ``slug/name`` of ``parent`` if it is stored (an unknown class or a bad name raises
    ``UnknownAgent``, stored or not)."""
    get_agent_class(slug)
    if not valid_name(name):
        raise UnknownAgent(f"Invalid instance name {name!r}")
    return AgentInstance.objects.select_related("owner").filter(parent=parent, slug=slug, name=name).first()


def _existing(slug: str, name: str, owner: Any) -> AgentInstance:
    instance = _stored(slug, name, owner)
    if instance is None:
        raise UnknownInstance(f"There is no conversation {slug}/{name}" + _whose(owner))
    return instance


_INSTANCE = statements.Columns(AgentInstance, "i")


@functools.cache
def _owner() -> statements.Columns:
    return statements.Columns(get_user_model(), "u")


def _stored(slug: str, name: str, owner: Any) -> AgentInstance | None:
    """The top-level instance at an address of ``owner``'s namespace (None: the global one), with
    its owner as ``select_related`` leaves it; None when there is none. Every connection to a
    conversation reads it: one hand-written statement, not a queryset to build
    (docs/decisions.md#the-statements-layer)."""
    select = statements.instance_at(_INSTANCE, _owner(), owner is not None)
    row = select.row(slug, name, *([owner.pk] if owner is not None else []))
    if row is None:
        return None
    instance = _INSTANCE.instance(row, 0, select.connection)
    assert isinstance(instance, AgentInstance)
    instance.owner = _owner().instance(row, len(_INSTANCE), select.connection)
    return instance


def _whose(owner: Any) -> str:
    return f" of {owner.get_username()}" if owner is not None else " without an owner"


def owner_parameter(instance: AgentInstance) -> str | None:
    """The ``owner`` query value by which staff address ``instance``; None when it needs none (shared)."""
    agent_class = agent_classes().get(instance.slug)
    if agent_class is not None and agent_class.shared:
        return None
    return instance.owner.get_username() if instance.owner is not None else ""


def chat_url(instance: AgentInstance, query: str = "") -> str:
    """The chat page of an instance or sub-agent (``/chat/<address>/``), with ``query`` (``owner=…``)."""
    top, *steps = [instance, *_ancestors(instance)][::-1]
    if not steps:
        url = reverse("agents_app:chat", args=[top.slug, top.name])
    else:
        sub_path = "".join(f"/{SUB_SEGMENT}/{step.slug}/{step.name}" for step in steps)  # reverse() quotes
        url = reverse("agents_app:sub-chat", kwargs={"slug": top.slug, "name": top.name, "sub": sub_path})
    return url + (f"?{query}" if query else "")


def staff_chat_url(instance: AgentInstance) -> str:
    """The chat page of an instance at the address staff open it by (``staff_query``)."""
    return chat_url(instance) + staff_query(instance)


def _ancestors(instance: AgentInstance) -> list[AgentInstance]:
    found = []
    while instance.parent is not None:
        instance = instance.parent
        found.append(instance)
    return found


def staff_query(instance: AgentInstance) -> str:
    """The query string by which staff address ``instance`` (``?owner=alice``, ``?owner=``, or "")."""
    owner = owner_parameter(instance)
    return "" if owner is None else "?" + urlencode({OWNER_PARAMETER: owner})
