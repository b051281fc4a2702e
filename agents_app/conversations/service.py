"""A user's conversations from outside a socket: the instance list, new and deleted conversations,
and messages sent over HTTP (the chat pages and the REST API).

Which conversation an address names, and who may use it, is ``registry.resolve``'s decision;
this module acts on the instances it returns. A message sent here becomes a chat turn like one
sent on the socket, and a Celery worker runs it (``dispatch.DRAIN_INSTANCE``): an HTTP request
has no event loop that outlives it, and every connection of the conversation still sees the
reply stream, on any process.
"""

import secrets
import time
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from .. import conf, dispatch, registry, turns, waits
from ..errors import ConversationConflict, PermissionDenied
from ..messages import UIMessage, new_message_id, new_request_id
from ..models import AgentInstance, ChatMessage, Turn
from ..protocol.parse import ChatRequest
from ..protocol.types import SUBMIT_TRIGGER

# Attempts at a fresh generated name before giving up (each collides with odds of 1 in 65,536).
NEW_NAME_ATTEMPTS = 5
# How often a caller waiting for a turn (``wait=true``) looks at its status again, in seconds.
WAIT_POLL_SECONDS = 0.1


def visible_to(user: Any) -> QuerySet[AgentInstance]:
    """The conversations ``user`` finds in their list: their own, and those of shared agents."""
    shared = [slug for slug, agent_class in registry.agent_classes().items() if agent_class.shared]
    return AgentInstance.objects.filter(
        Q(owner=user) | Q(owner__isnull=True, slug__in=shared), parent=None,
    ).select_related("owner").order_by("-updated_at", "-pk")


# Rows shown in each of the index's groups of conversations that are not the user's own.
INDEX_GROUP_LIMIT = 100


@dataclass(frozen=True)
class IndexEntry:
    """One conversation in the index: the row, where the user opens it, and its schedules' names."""

    instance: AgentInstance
    url: str
    schedules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Index:
    """What the instance list shows ``user``, grouped (each group newest first)."""

    own: list[IndexEntry]
    # Global-namespace conversations the user may open: shared agents' (everyone), and for staff
    # the others too (agents talking to agents), at their staff address.
    shared: list[IndexEntry]
    # Staff only: the conversations that schedules post to, where else only an admin link leads.
    scheduled: list[IndexEntry]


def index_of(user: Any) -> Index:
    """The conversations ``user`` may open, grouped for the instance list (see ``Index``)."""
    newest = ("-updated_at", "-pk")
    own = [IndexEntry(row, registry.chat_url(row))
           for row in AgentInstance.objects.filter(owner=user, parent=None).order_by(*newest)]
    shared_slugs = [slug for slug, agent_class in registry.agent_classes().items() if agent_class.shared]
    scheduled: list[IndexEntry] = []
    global_rows = AgentInstance.objects.filter(owner__isnull=True, parent=None)
    if user.is_staff:
        rows = (AgentInstance.objects.filter(parent=None, schedules__isnull=False).distinct()
                .select_related("owner").prefetch_related("schedules").order_by(*newest)[:INDEX_GROUP_LIMIT])
        scheduled = [IndexEntry(row, registry.staff_chat_url(row),
                                tuple(sorted(schedule.name for schedule in row.schedules.all())))
                     for row in rows]
        global_rows = global_rows.exclude(pk__in=[entry.instance.pk for entry in scheduled])
    else:
        global_rows = global_rows.filter(slug__in=shared_slugs)
    shared = [IndexEntry(row, registry.staff_chat_url(row))
              for row in global_rows.order_by(*newest)[:INDEX_GROUP_LIMIT]]
    return Index(own=own, shared=shared, scheduled=scheduled)


def create(slug: str, user: Any, name: str | None = None) -> AgentInstance:
    """A new conversation with agent ``slug`` in ``user``'s namespace (the global one if shared).

    ``name`` None: a fresh one is made (``2026-01-31-3fa9``).

    Raises:
        UnknownAgent, NotAuthenticated: see ``registry.resolve``.
        ConversationConflict: ``name`` is taken.
    """
    if name is not None:
        return _create(slug, name, user)
    for attempt in range(1, NEW_NAME_ATTEMPTS + 1):
        try:
            return _create(slug, _fresh_name(), user)
        except ConversationConflict:
            if attempt == NEW_NAME_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _fresh_name() -> str:
    return f"{timezone.localdate():%Y-%m-%d}-{secrets.token_hex(2)}"


def _create(slug: str, name: str, user: Any) -> AgentInstance:
    _, owner = registry.resolve(slug, name, user)
    try:
        with transaction.atomic():
            return AgentInstance.objects.create(slug=slug, name=name, owner=owner)
    except IntegrityError:  # unique_instance_per_owner / unique_ownerless_instance
        raise ConversationConflict(f"There is already a conversation {slug}/{name}") from None


def delete(instance: AgentInstance, user: Any) -> None:
    """Delete ``user``'s own conversation, with its transcript, turns and parked actions.

    Raises:
        PermissionDenied: it is not theirs (staff included: the admin keeps others' conversations).
        ConversationConflict: a turn is queued or running; stop it first (nothing is deleted).
    """
    if instance.owner_id is None or instance.owner_id != user.pk:
        raise PermissionDenied("Only its owner may delete a conversation")
    with transaction.atomic():
        if Turn.objects.of(instance).active().exists():
            raise ConversationConflict("A reply is still queued or running; stop it first")
        instance.delete()


def send_message(instance: AgentInstance, text: str, user: Any) -> Turn:
    """Add a user message to the conversation and queue the turn that answers it.

    The turn is a chat turn asked by ``user`` (``authorize_turn`` sees them), run by a worker.

    Raises:
        ConversationConflict: the agent drops messages sent while a reply runs
            (``message_concurrency = "drop"``), and one runs; nothing was stored.
    """
    message: UIMessage = {"id": new_message_id(), "role": "user", "parts": [{"type": "text", "text": text}]}
    request_id = new_request_id()
    admitted = turns.admit(instance, ChatRequest(
        request_id=request_id, messages=[message], trigger=SUBMIT_TRIGGER, client_tools=None, body=None,
    ), user=user)
    if admitted.dropped:
        raise ConversationConflict("A reply is running and this agent drops messages sent meanwhile")
    dispatch.send(dispatch.DRAIN_INSTANCE, instance.pk)
    return Turn.objects.get(instance=instance, request_id=request_id)


def wait(turn: Turn, timeout: float | None = None) -> Turn:
    """The turn once it has finished, or as it stands after ``timeout`` seconds (default
    ``AGENT_API_WAIT_TIMEOUT``)."""
    deadline = time.monotonic() + (conf.get("AGENT_API_WAIT_TIMEOUT") if timeout is None else timeout)
    with waits.watching([turn.instance_id]) as watch:
        turn.refresh_from_db()
        while not turn.is_finished and (left := deadline - time.monotonic()) > 0:
            watch.pause(WAIT_POLL_SECONDS, at_most=left)
            turn.refresh_from_db()
    return turn


def reply_of(turn: Turn) -> UIMessage | None:
    """The assistant message answering ``turn``: the first one after the messages it was asked with."""
    asked = ChatMessage.objects.filter(instance_id=turn.instance_id, message_id__in=turn.message_ids)
    last_position = max(asked.values_list("position", flat=True), default=None)
    if last_position is None:
        return None
    reply = ChatMessage.objects.filter(
        instance_id=turn.instance_id, role="assistant", position__gt=last_position
    ).order_by("position").only("data").first()
    return reply.data if reply is not None else None
