"""The persisted transcript of an agent instance (``ChatMessage`` rows).

Sync functions: callers in async code wrap them in ``database_sync_to_async``. Each write runs
in one transaction so a reader never sees half a transcript, and marks the instance changed
(``updated_at``, the order of the instance list) first: the instance row, then its messages, the
lock order of every writer. Every message is stored as ``sanitize.prepare_for_storage`` makes it
(provider leftovers removed, the agent's hook, the row-size guard), only when its JSON changed,
and a ``Policy`` with ``max_messages`` then deletes the oldest rows beyond it.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import takewhile
from typing import Any, Final

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from . import statements
from .messages import OUTCOME_KEYS, UIMessage, is_tool_part, merge_user_messages
from .models import AgentInstance, ChatMessage, RequestContext
from .protocol import codec
from .sanitize import prepare_for_storage

# Rows deleted per statement when the transcript is trimmed to ``max_messages`` (the reference's
# batched IN deletes stay within SQLite's 100 bound parameters).
PRUNE_BATCH_SIZE: Final = 100
# Rows per INSERT when a request brings many new messages: short statements, because the database
# driver holds the GIL while it binds them (500 rows stalled the event loop ~100 ms).
BULK_BATCH_SIZE: Final = 100


@dataclass(frozen=True)
class Policy:
    """What an agent class says about storing its messages (``registry.storage_policy``)."""

    # ``ChatAgent.sanitize_message_for_persistence``: runs after the built-in sanitizer.
    sanitize: Callable[[UIMessage], UIMessage] | None = None
    # ``ChatAgent.max_persisted_messages``: older rows are deleted after each write; None keeps all.
    max_messages: int | None = None

    @classmethod
    def of(cls, agent: Any) -> "Policy":
        """The policy of a ``ChatAgent`` object (its hook and ``max_persisted_messages``)."""
        return cls(sanitize=agent.sanitize_message_for_persistence, max_messages=agent.max_persisted_messages)

    def prepare(self, message: UIMessage) -> UIMessage:
        return prepare_for_storage(message, self.sanitize)


DEFAULT_POLICY = Policy()


# The transcript is read two or three times per turn: these reads are written out
# (``agents_app.statements``), and its rows read as plain values, not model instances. A caller
# that reads them in a statement of its own (the admission's, with the queue) reads these columns.
STORED_COLUMNS = statements.Columns(ChatMessage, "m", ("id", "message_id", "position", "data"))


_ROWS = statements.transcript_rows(STORED_COLUMNS)
_NEXT_POSITION = statements.last_position(ChatMessage)


def _read(instance: AgentInstance | int) -> list[tuple[Any, ...]]:
    return _ROWS.rows(getattr(instance, "pk", instance))


def _converted(rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """(pk, message id, position, data) of each row read (``STORED_COLUMNS``), in order."""
    return STORED_COLUMNS.converted(rows, _ROWS.connection)


def load(instance: AgentInstance | int) -> list[UIMessage]:
    """The transcript of an instance (or instance pk) in order (what ``get-messages`` returns)."""
    return from_rows(_read(instance))


def load_json(instance: AgentInstance | int) -> list[str]:
    """``load``'s messages as the JSON texts the database holds (valid JSON: the column's own check
    on SQLite, ``jsonb`` on PostgreSQL, which Django's backend reads as text), unread: the end of a
    turn sends them on (``codec.embedded``) without reading every stored message and writing it again."""
    return [text for *_, text in _read(instance)]


def from_rows(rows: Sequence[Sequence[Any]]) -> list[UIMessage]:
    """``load``'s result from rows a caller read itself (``STORED_COLUMNS``, in order)."""
    return [data for _pk, _message_id, _position, data in _converted(rows)]


def next_position(instance: AgentInstance) -> int:
    """Where the next new message of the instance goes."""
    row = _NEXT_POSITION.row(instance.pk)
    return 0 if row is None or row[0] is None else int(row[0]) + 1


def _tool_call_ids(message: UIMessage) -> set[str]:
    return {p["toolCallId"] for p in message.get("parts", []) if is_tool_part(p) and "toolCallId" in p}


@dataclass
class _Row:
    """A stored message as ``persist`` works on it (``pk`` None: inserted by this call). On SQLite
    a stored row's JSON stays ``text`` until it is needed (``message``, ``same_as``)."""

    pk: int | None
    position: int
    data: UIMessage | None
    text: str | None = None

    def message(self) -> UIMessage:
        if self.data is None:
            self.data = _DATA.values((self.text,), 0, _ROWS.connection)[0]
        return self.data

    def same_as(self, message: UIMessage) -> bool:
        """Whether the client's copy is the stored message, by their JSON texts: a row written by
        this app holds the codec's text of its message (``statements``), so equal texts are equal
        messages and the stored text need not be read. Another text (a row the ORM wrote, another
        spacing) or a message that is not JSON answers no: the caller compares the values."""
        if self.text is None or self.data is not None:
            return False
        try:
            same = codec.dumps(message) == self.text
        except (TypeError, ValueError):
            return False
        if same:
            self.data = message
        return same


# The columns of a stored row before its JSON, and the JSON alone (``_Row``).
_KEYS = statements.Columns(ChatMessage, "m", ("id", "message_id", "position"))
_DATA = statements.Columns(ChatMessage, "m", ("data",))


def _stored(read: Sequence[Sequence[Any]]) -> dict[str, _Row]:
    """The stored messages (``STORED_COLUMNS`` rows) by id. On SQLite, whose rows hold the JSON text
    as written, each one's text is kept to be compared (``_Row.same_as``) and read only if needed:
    every request re-sends the whole transcript, and reading every stored message to find it
    unchanged was most of an admission's work on a long conversation. On PostgreSQL the stored
    text is ``jsonb``'s own (its spacing, its key order), never the client's: each row is read."""
    connection = _ROWS.connection
    if connection.vendor != "sqlite":
        return {message_id: _Row(pk, position, data) for pk, message_id, position, data in _converted(read)}
    # The columns before the JSON converted, the JSON left as read (SQLite's text).
    return {message_id: _Row(pk, position, None, text)
            for pk, message_id, position, text in _KEYS.converted(read, connection)}


def persist(
    instance: AgentInstance, incoming: list[UIMessage], *, delete_stale: bool = False,
    policy: Policy = DEFAULT_POLICY, touched: bool = False, stored: Sequence[Sequence[Any]] | None = None,
) -> list[UIMessage]:
    """Merge a client's copy of the transcript into the stored one and return the result.

    * A message with a known id replaces the stored one in place, unless the server already has
      tool outputs the client's copy lacks (the server's results win).
    * An assistant message sharing a tool call id with a stored one takes the stored id.
    * New messages are appended in the order given.
    * ``delete_stale`` (a chat request): when every incoming id is already stored, the client sent
      a subset (regenerate trimmed the last reply), so stored rows it left out are deleted.

    ``touched``: the caller's transaction began with ``AgentInstance.objects.touch`` (module docstring).
    ``stored``: the instance's stored messages as that transaction has read them since, in order,
    ``STORED_COLUMNS`` as the database returned them; read here when not given.
    """
    # No savepoint inside a caller's transaction (admission's): a failure here fails that too.
    with transaction.atomic(savepoint=False):
        if not touched:
            AgentInstance.objects.touch(instance.pk)
        # Plain rows, not model instances: this runs on every request, over the whole transcript.
        rows = _stored(_read(instance) if stored is None else stored)
        known = set(rows)
        # Stored messages by the tool calls in them, made when a new assistant message has calls.
        by_tool_call: dict[str, str] | None = None
        position = max((row.position for row in rows.values()), default=-1) + 1
        seen: list[str] = []
        # New messages are inserted together at the end: a client's first request may carry
        # thousands of them (one INSERT each took seconds, holding the database and the thread).
        created: dict[str, ChatMessage] = {}
        for message in incoming:
            message_id = message["id"]
            calls = _tool_call_ids(message) if message_id not in rows and message.get("role") == "assistant" else None
            if calls:
                if by_tool_call is None:
                    by_tool_call = {cid: mid for mid in known for cid in _tool_call_ids(rows[mid].message())}
                shared = calls & by_tool_call.keys()
                if shared:
                    message_id = by_tool_call[next(iter(shared))]
                    message = {**message, "id": message_id}
            seen.append(message_id)
            row = rows.get(message_id)
            if row is None:
                data = policy.prepare(message)
                rows[message_id] = _Row(None, position, data)
                created[message_id] = ChatMessage(
                    instance=instance, message_id=message_id, role=message["role"], position=position, data=data,
                )
                position += 1
            elif message_id in created:  # the same new id twice: the later copy wins
                row.data = created[message_id].data = policy.prepare(message)
                created[message_id].role = message["role"]
            elif not row.same_as(message):
                data = row.message()
                merged = _keep_server_outcome(data, _keep_server_tool_results(data, message))
                # Stored as prepared: an unchanged copy of a stored message is not prepared again.
                if merged != data and (merged := policy.prepare(merged)) != data:
                    row.data = merged
                    statements.update(ChatMessage, {"pk": row.pk}, data=merged, role=merged["role"],
                                      updated_at=timezone.now())
        statements.insert_many(list(created.values()), batch_size=BULK_BATCH_SIZE)
        if delete_stale and incoming and all(mid in known for mid in seen):
            stale = set(rows) - set(seen)
            if stale:
                ChatMessage.objects.filter(instance=instance, message_id__in=stale).delete()
                for message_id in stale:
                    del rows[message_id]
        if _prune(instance, policy):
            return load(instance)
        return [row.message() for row in sorted(rows.values(), key=lambda row: row.position)]


def _keep_server_tool_results(stored: UIMessage, incoming: UIMessage) -> UIMessage:
    """The incoming message, with tool parts the server has already settled kept as stored.

    The server is the authority on a settled call: a client's copy may predate a result, an
    approval decided later by staff, or the descriptors the AI SDK does not keep on an output
    (``approvalDescriptor``), and must not overwrite them.
    """
    settled = {
        p["toolCallId"]: p
        for p in stored.get("parts", [])
        if is_tool_part(p) and p.get("state") in ("output-available", "output-error", "output-denied")
    }
    if not settled:
        return incoming
    parts = [settled.get(p.get("toolCallId"), p) if is_tool_part(p) else p for p in incoming.get("parts", [])]
    return {**incoming, "parts": parts}


def _keep_server_outcome(stored: UIMessage, incoming: UIMessage) -> UIMessage:
    """The incoming message, with how the stored reply's turn ended (``messages.mark_outcome``) as stored.

    Only the server knows it: the client that sent a failed or stopped request holds a copy built
    from the stream, without the mark, and sends it back with its next request; that copy must not
    erase the mark (nor a stale copy bring back one a continuation cleared).
    """
    def marks(message: UIMessage) -> dict[str, Any]:
        metadata = message.get("metadata")
        return {k: metadata[k] for k in OUTCOME_KEYS if k in metadata} if isinstance(metadata, dict) else {}

    kept = marks(stored)
    if marks(incoming) == kept:
        return incoming
    metadata = incoming.get("metadata")
    rest = {k: v for k, v in metadata.items() if k not in OUTCOME_KEYS} if isinstance(metadata, dict) else {}
    return {**incoming, "metadata": {**rest, **kept}}


def update_tool_part(instance: AgentInstance, matches: Callable[[dict[str, Any]], bool],
                     update: Callable[[dict[str, Any]], dict[str, Any]], *,
                     policy: Policy = DEFAULT_POLICY) -> UIMessage | None:
    """Replace the newest tool part that ``matches`` by ``update(part)``; the updated message, or None.

    One transaction with the instance's replies locked, so updates of one reply (a client's
    answer, a staff decision) are serialised. ``update`` may raise to refuse the change.
    """
    with transaction.atomic():
        AgentInstance.objects.touch(instance.pk)
        rows = ChatMessage.objects.select_for_update().filter(instance=instance, role="assistant").order_by("-position")
        for row in rows:
            parts = row.data.get("parts", [])
            for index, part in enumerate(parts):
                if is_tool_part(part) and matches(part):
                    row.data = policy.prepare({**row.data, "parts": [*parts[:index], update(part), *parts[index + 1:]]})
                    row.save(update_fields=["data", "updated_at"])
                    return row.data
    return None


def save_message(instance: AgentInstance, message: UIMessage, *, after: str | None = None,
                 policy: Policy = DEFAULT_POLICY, touched: bool = False) -> UIMessage:
    """Insert or replace one message (the server's own writes: replies, tool results); returns it as stored.

    A new message goes at the end, or right after message ``after`` when that one is stored
    (a recovered reply goes after the request it answers, before messages sent since).
    ``touched``: as ``persist``'s.
    """
    stored = policy.prepare(message)
    # No savepoint inside a caller's transaction (the end of a turn): a failure fails that too.
    with transaction.atomic(savepoint=False):
        if not touched:
            AgentInstance.objects.touch(instance.pk)
        if after is None:
            _save(instance.pk, stored)
        else:
            _save_after(instance, stored, after)
        _prune(instance, policy)
    return stored


def _save(instance_pk: int, stored: UIMessage) -> None:
    now = timezone.now()
    _SAVE.write(instance_pk, stored["id"], stored["role"], instance_pk, stored, now, now)


def _save_after(instance: AgentInstance, stored: UIMessage, after: str) -> None:
    """``stored`` replaced in place, or else inserted right after message ``after`` (at the end if that one is gone)."""
    if statements.update(ChatMessage, {"instance": instance.pk, "message_id": stored["id"]},
                         data=stored, role=stored["role"], updated_at=timezone.now()):
        return
    anchor = ChatMessage.objects.filter(instance=instance, message_id=after).first()
    if anchor is None:
        _save(instance.pk, stored)
        return
    position = anchor.position + 1
    ChatMessage.objects.filter(instance=instance, position__gte=position).update(position=F("position") + 1)
    statements.insert(ChatMessage(
        instance=instance, message_id=stored["id"], role=stored["role"], position=position, data=stored,
    ))


# A message replaced in place, or appended after the last: the end of every turn stores its reply with it.
_SAVE = statements.save_message(ChatMessage)


def merge_user_run(instance: AgentInstance, from_position: int, policy: Policy = DEFAULT_POLICY, *,
                   touched: bool = False) -> bool:
    """Join the consecutive user messages stored from ``from_position`` on into one (``merge`` concurrency).

    The joined message takes the place and the id of the last of them (``messages.merge_user_messages``).
    False when there were fewer than two. ``touched``: as ``persist``'s.
    """
    with transaction.atomic():
        if not touched:
            AgentInstance.objects.touch(instance.pk)
        rows = ChatMessage.objects.filter(instance=instance, position__gte=from_position).order_by("position")
        run = list(takewhile(lambda row: row.role == "user", rows))
        if len(run) < 2:
            return False
        last = run[-1]
        last.data = policy.prepare(merge_user_messages([row.data for row in run]))
        last.save(update_fields=["data", "updated_at"])
        ChatMessage.objects.filter(pk__in=[row.pk for row in run[:-1]]).delete()
    return True


def _prune(instance: AgentInstance, policy: Policy) -> bool:
    """Delete the oldest messages beyond ``policy.max_messages`` (storage only), in batches; True if any."""
    if policy.max_messages is None:
        return False
    excess = ChatMessage.objects.filter(instance=instance).count() - max(0, policy.max_messages)
    if excess <= 0:
        return False
    oldest = list(ChatMessage.objects.filter(instance=instance).order_by("position")
                  .values_list("pk", flat=True)[:excess])
    for batch in _batches(oldest, PRUNE_BATCH_SIZE):
        ChatMessage.objects.filter(pk__in=batch).delete()
    return True


def _batches(items: list[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def clear(instance: AgentInstance) -> None:
    """Delete the transcript and the stored request context."""
    with transaction.atomic():
        AgentInstance.objects.touch(instance.pk)
        ChatMessage.objects.filter(instance=instance).delete()
        RequestContext.objects.filter(instance=instance).delete()


def store_request_context(
    instance: AgentInstance, body: dict[str, Any] | None, client_tools: list[dict[str, Any]] | None
) -> None:
    """Remember the last custom body and client tools (continuations reuse them).

    One upsert statement, written out (``update_or_create`` took four). A chat request that sends
    what is stored already writes nothing (``turns.admission.read_queue`` tells), so ``updated_at``
    is when the context last changed.
    """
    statements.upsert(RequestContext(instance=instance, body=body, client_tools=client_tools),
                      "instance", ("body", "client_tools", "updated_at"))


def request_context(instance: AgentInstance) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    ctx = RequestContext.objects.filter(instance=instance).first()
    return (ctx.body, ctx.client_tools) if ctx else (None, None)
