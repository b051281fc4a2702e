"""Admitting chat requests into the turn queue, under the agent's ``message_concurrency``.

``accept_chat`` decides (``agents_app.concurrency``) and stores in one transaction that first
writes the instance's row: concurrent submits for one instance, on any process, are serialised by
that write (PostgreSQL's row lock; SQLite's single writer), so each sees the turns the others
queued. A dropped submit stores nothing; the others store their user messages and a ``Turn`` that
remembers how it was admitted. When a claimed turn's time comes, ``when_due`` waits out a
debounce, joins a ``merge``'s user messages again, and says whether it still runs (a newer
overlapping submit or a clear since makes it end ``skipped``). The rules: docs/architecture.md.
"""

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction
from django.utils import timezone

from .. import concurrency, conf, registry, statements, transcript
from ..abort import AbortSignal
from ..errors import AgentConfigurationError
from ..llm import files, ui_messages
from ..messages import UIMessage, new_message_id, request_message_ids
from ..models import AgentInstance, MCPServerConfig, RequestContext, Turn
from ..protocol.parse import ChatRequest, ProtocolError
from ..protocol.types import SUBMIT_TRIGGER
from ..recovery import memory
from ..streaming import buffer


@dataclass(frozen=True)
class Admission:
    """The outcome of ``accept_chat``: the stored transcript and the queued turn, or (dropped) what
    the sender rolls back to."""

    transcript: list[UIMessage]
    dropped: bool = False
    turn: Turn | None = None
    # The instance has MCP servers added at runtime (read with the queue, for the turn's start).
    mcp_servers: bool = False
    # The stream buffer of a claimed turn that starts at once, stored with it (``accept_chat``).
    stream_pk: int | None = None

    @property
    def claimed(self) -> bool:
        """The turn was inserted running, for ``claim_as``."""
        return self.turn is not None and self.turn.status == Turn.Status.RUNNING


def accept_chat(instance: AgentInstance, request: ChatRequest, origin_channel: str, user: Any,
                setting: concurrency.MessageConcurrency, policy: transcript.Policy,
                claim_as: str | None = None) -> Admission:
    """Decide and store one ``cf_agent_use_chat_request`` (module docstring), whose messages the
    caller has found readable (``check_readable``, before any write lock is taken).

    ``claim_as``: the worker label (``liveness.worker_label``) of a caller that runs the queue's
    next turn next; when no other turn of the instance is queued or running, the turn is that
    one, and is inserted claimed for it (``turns.lock``): the claim's read and write are spared.
    Its ``instance`` is then the row as this transaction read it.

    Raises:
        ProtocolError: the request id already names a turn of this conversation (nothing stored).
    """
    try:
        # No savepoint inside a caller's transaction (``turns._admit_and_claim``): a failure fails that too.
        with transaction.atomic(savepoint=False):
            # The decision's lock, and the conversation's mark of a change: this write makes
            # concurrent accepts of the instance take turns, and reads the row back.
            current = AgentInstance.objects.touch_and_read(instance.pk)
            user_pk = user.pk if getattr(user, "is_authenticated", False) else None
            read = read_queue(instance.pk, user_pk, request.body, request.client_tools)
            newest_active, user_turns, mcp_servers, context_kept = read[0][:_QUEUE_COLUMNS]
            stored_rows = [row[_QUEUE_COLUMNS:] for row in read if row[_QUEUE_COLUMNS] is not None]
            if user_pk is not None:
                _check_user_turns(user_turns, request.request_id)
            overlapping = newest_active == current.generation
            decision = concurrency.decide(setting, submit=request.trigger == SUBMIT_TRIGGER, overlapping=overlapping)
            if decision.action == "drop":
                return Admission(current_transcript(instance, transcript.from_rows(stored_rows)), dropped=True)
            submit_sequence = None
            if decision.supersedable:
                submit_sequence = current.overlap_sequence + 1
                statements.update(AgentInstance, {"pk": instance.pk}, overlap_sequence=submit_sequence)
            merge_from = _merge_start(instance, current.generation) if decision.strategy == "merge" else None
            # The new messages and the request's context go with the turn's insert (on PostgreSQL,
            # when nothing reads them first: ``statements.together``).
            with statements.together(Turn):
                stored = transcript.persist(instance, request.messages, delete_stale=True, policy=policy,
                                            touched=True, stored=stored_rows)
                if merge_from is not None and transcript.merge_user_run(instance, merge_from, policy, touched=True):
                    stored = transcript.load(instance)
                if not context_kept:  # most requests send the body and tools of the one before
                    transcript.store_request_context(instance, request.body, request.client_tools)
                turn = Turn(
                    instance=current, request_id=request.request_id, kind=Turn.Kind.CHAT,
                    generation=current.generation, origin_channel=origin_channel,
                    user=user if user_pk is not None else None, body=request.body, client_tools=request.client_tools,
                    message_ids=request_message_ids(request.messages), assistant_message_id=new_message_id(),
                    strategy=decision.strategy or "", submit_sequence=submit_sequence, merge_from=merge_from,
                    run_after=(timezone.now() + timedelta(milliseconds=decision.wait_ms)
                               if decision.wait_ms is not None else None),
                )
                stream = None
                if claim_as is not None and newest_active is None:
                    turn.status, turn.started_at, turn.worker = Turn.Status.RUNNING, timezone.now(), claim_as
                    turn.memory_watch = memory.watch()
                    if starts_at_once(turn):  # its stream buffer opens with it, one statement on PostgreSQL
                        stream = buffer.new_record(turn, turn.assistant_message_id)
                if stream is None:
                    statements.insert(turn)
                else:
                    statements.insert_linked(turn, stream, "turn")
    except IntegrityError:  # unique_turn_request: the whole request is rolled back
        raise ProtocolError(f"Request id {request.request_id!r} was already used in this conversation",
                            code="duplicate_request_id", request_id=request.request_id) from None
    return Admission(stored, turn=turn, mcp_servers=bool(mcp_servers), stream_pk=stream.pk if stream else None)


def check_readable(messages: list[UIMessage], request_id: str | None = None,
                   instance: AgentInstance | None = None) -> None:
    """Refuse messages the model could not read (``llm.ui_messages``): stored, they would fail every later turn.

    With the ``instance``, a file by URL its agent's model would download and may not (``llm.files``)
    is refused too; the model is built only when the messages carry such a file.
    """
    try:
        ui_messages.check(messages)
    except ui_messages.UnreadableMessage as exc:
        raise ProtocolError(str(exc), code="invalid_message", request_id=request_id) from None
    if instance is None or not files.downloaded_by_url(messages):
        return
    try:
        model = registry.agent_for(instance).get_model()
    except AgentConfigurationError:  # the turn reports it, as for any message
        return
    if (reason := files.refused_download(messages, model)) is not None:
        raise ProtocolError(reason, code="invalid_message", request_id=request_id)


def _check_user_turns(active: int, request_id: str) -> None:
    """Refuse a request of a signed-in user who has ``AGENT_MAX_ACTIVE_TURNS_PER_USER`` turns queued
    or running (``active``)."""
    limit = conf.get("AGENT_MAX_ACTIVE_TURNS_PER_USER")
    if limit is not None and active >= limit:
        raise ProtocolError(f"You have {limit} replies queued or running; wait for one to finish",
                            code="too_many_turns", request_id=request_id)


# The admission's one read, made once it holds the instance's row: the newest generation of the
# instance's queued or running turns (None: there is none; the current one: the request overlaps a
# turn), how many turns the user has queued or running, whether the instance has runtime MCP servers
# (a turn it inserts claimed starts without reading them again when it has none:
# ``engine.inserted_claimed``), whether the stored request context is the request's (then it is not
# written again), then the stored transcript that ``transcript.persist`` merges the request into, a
# row per message after those four columns.
_QUEUE_USER_AND_TRANSCRIPT = statements.queue_user_and_transcript(Turn, MCPServerConfig, RequestContext,
                                                                  transcript.STORED_COLUMNS)
# The columns before the transcript's in each row of that read.
_QUEUE_COLUMNS = 4


def read_queue(instance_pk: int, user_pk: int | None, body: dict[str, Any] | None,
               client_tools: list[dict[str, Any]] | None) -> list[tuple[Any, ...]]:
    """``_QUEUE_USER_AND_TRANSCRIPT`` for the instance, the user (None: anonymous) and a request's
    context (its custom body and client tools)."""
    context = statements.field_values(RequestContext, body=body, client_tools=client_tools)
    return _QUEUE_USER_AND_TRANSCRIPT.rows(instance_pk, *Turn.ACTIVE_STATUSES, user_pk, *Turn.ACTIVE_STATUSES,
                                           instance_pk, instance_pk, *context, instance_pk)


def _merge_start(instance: AgentInstance, generation: int) -> int:
    """Where the overlap's user messages begin: as the first merge turn of this overlap said, or here."""
    active = Turn.objects.of(instance).active().filter(generation=generation)
    earlier = active.filter(strategy="merge", merge_from__isnull=False).order_by("pk").values_list(
        "merge_from", flat=True).first()
    return int(earlier) if earlier is not None else transcript.next_position(instance)


def current_transcript(instance: AgentInstance, messages: list[UIMessage]) -> list[UIMessage]:
    """The stored transcript (``messages``, as the caller read it) with the reply being streamed as
    far as it is stored (a dropped sender's view)."""
    stream = buffer.streaming(instance)
    if stream is None:
        return messages
    partial = buffer.partial_reply(stream, messages).message
    if not partial.get("parts"):
        return messages
    if any(message["id"] == partial["id"] for message in messages):
        return [partial if message["id"] == partial["id"] else message for message in messages]
    return [*messages, partial]


# Strategies whose turns may be superseded, debounced or merged when their time comes.
DEFERRED_STRATEGIES = frozenset({"latest", "merge", "debounce"})


def has_preamble(turn: Turn) -> bool:
    """A turn's run has steps before its start (``engine.TurnRun._run``): a debounce or merge to
    wait for (``when_due``), messages to compute (``save_messages``), a recovery plan."""
    return turn.strategy in DEFERRED_STRATEGIES or turn.pending_messages or turn.kind == Turn.Kind.RECOVERY


def starts_at_once(turn: Turn) -> bool:
    """A claimed turn goes straight to its start: a new prompt with no preamble, nothing to continue.
    The engine's claims start such turns in the claim's unit; ``accept_chat`` opens their stream
    buffer with them."""
    return not (turn.continuation or has_preamble(turn))


@dataclass(frozen=True)
class Due:
    """What ``when_due`` found: whether the turn still runs, and the transcript if a merge changed it."""

    run: bool
    transcript: list[UIMessage] | None = None


async def when_due(turn: Turn, signal: AbortSignal) -> Due:
    """Wait for the turn's debounce, merge again, and say whether it still runs (module docstring).

    The wait ends early when the turn is cancelled (a clear cancels it, and then it is stale).
    """
    if turn.run_after is not None:
        seconds = (turn.run_after - timezone.now()).total_seconds()
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), timeout=seconds)
    merged = None
    if turn.strategy == "merge" and turn.merge_from is not None:
        merged = await database_sync_to_async(_merge_again)(turn)
    stale = turn.is_stale(*await database_sync_to_async(AgentInstance.objects.queue_state)(turn.instance_id))
    return Due(run=not stale, transcript=merged)


def _merge_again(turn: Turn) -> list[UIMessage] | None:
    assert turn.merge_from is not None
    instance = turn.instance
    policy = transcript.Policy.of(registry.agent_for(instance))
    return transcript.load(instance) if transcript.merge_user_run(instance, turn.merge_from, policy) else None
