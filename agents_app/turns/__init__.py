"""Transport-agnostic entry points of the turn engine.

Consumers, Celery tasks, the REST API and Python code all call these; none of them runs a model
or touches the transcript directly. Every turn is a ``Turn`` row from the moment it is accepted,
and runs through the per-instance queue (``turns.lock``): one at a time, in order, on whichever
process claims it.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .. import conf, database, dispatch, events, registry, transcript
from ..messages import UIMessage, awaits_interaction, request_message_ids
from ..models import AgentInstance, Turn
from ..protocol import frames
from ..protocol.parse import ChatRequest, ProtocolError
from ..protocol.types import Outcome
from ..recovery import liveness
from ..recovery import service as recovery
from ..streaming import buffer, fanout
from . import admission, control, engine
from .control import cancel, cancel_all
from .engine import drain, start_drain
from .interactions import apply_tool_approval, apply_tool_result, enqueue_continuation
from .programmatic import continue_last_turn, persist_messages, save_messages

__all__ = [
    "admit", "apply_tool_approval", "apply_tool_result", "cancel", "cancel_all", "clear", "continue_last_turn",
    "drain", "enqueue_continuation", "has_pending_interaction", "persist_messages", "queued_instances",
    "recover_interrupted", "recover_stream", "recover_turn", "replace_messages", "reset_turn_state", "run_recovery",
    "save_messages", "start_drain", "submit_chat", "sweep_on_startup", "wait_until_stable",
]

logger = logging.getLogger("agents_app.turns")


async def submit_chat(instance: AgentInstance, request: ChatRequest, origin_channel: str, user: Any = None,
                      joined: Callable[[AgentInstance, bool], Awaitable[None]] | None = None) -> None:
    """Accept a ``cf_agent_use_chat_request``: store the user's messages and queue the turn, or drop it.

    The agent's ``message_concurrency`` decides (``turns.admission``). Order of frames as the
    reference server (docs/protocol.md#normal-turn): the other connections see the incoming
    transcript and again the stored one; the reply streams to everyone. A dropped submit is rolled
    back for the sender alone: the transcript as it stands, then a ``skipped`` terminal frame
    (docs/protocol.md#skip-frames).

    An unsaved ``instance`` (a new address, ``registry.locate``) is made in the admission's
    transaction, one write where there were two (docs/architecture.md#admission); a request
    that is refused makes nothing. ``joined(stored, created)`` is then awaited once the row is
    committed (and announced meanwhile), before any frame of the turn goes out: the sender's
    connection follows the conversation there (``created`` False: another request made the row
    first).

    Raises:
        ProtocolError: the request id already names a turn of this conversation (nothing stored).
    """
    channel = await control.channel_name()
    try:
        stored, made, admitted, first = await database.run(
            _admit_and_claim, instance, request, origin_channel, user, channel, alone=control.turns_here() == 0)
    except ProtocolError as exc:
        events.emit_chat(instance, events.REQUEST_FAILED, requestId=request.request_id, stage="persist",
                         messagesPersisted=False, error=str(exc))
        raise
    # The news of new rows goes to Redis beside the sender's joining, not before it: each is a
    # round trip, and under a burst of new conversations a round trip is a turn of a busy loop.
    news = asyncio.gather(*(registry.announce(row) for row in made)) if made else None
    try:
        if joined is not None and instance.pk is None:
            await joined(stored, bool(made) and made[-1] is stored)
    finally:  # the turn is admitted (and maybe claimed here): it runs even if the sender could not follow it
        if admitted.dropped:
            await fanout.publish(stored.pk, frames.chat_messages(admitted.transcript), frames.done(
                request_id=request.request_id, outcome=Outcome.SKIPPED,
                message_ids=request_message_ids(request.messages),
            ), only=origin_channel)
        else:
            start_drain(stored.pk, first=first, lead=engine.Lead(
                request_id=request.request_id,
                frames=(frames.chat_messages(request.messages), frames.chat_messages(admitted.transcript)),
                exclude=(origin_channel,),
            ))
        if news is not None:
            await news


def _admit_and_claim(instance: AgentInstance, request: ChatRequest, origin_channel: str, user: Any, channel: str
                     ) -> tuple[AgentInstance, list[AgentInstance], admission.Admission, engine.QueueLook | None]:
    """The instance stored (``registry.make_in_transaction``: itself and the rows made for it),
    ``admit``, then the drain's first look at the queue, in the same thread hop and transaction:
    the turn just queued is usually the next, and starts there (``engine.claim_next_or_latest``).
    One write transaction instead of three (of four for a new conversation) is one wait for
    SQLite's write lock when processes start turns at once. A look that fails is the drain's to
    make again; the request stays admitted."""
    # Before the first write; on SQLite's fast path the unit holds the write lock from its start
    # (``agents_app.database``), so there the check is inside it (bench/README.md, "Twenty-second round").
    admission.check_readable(request.messages, request.request_id, instance)
    with transaction.atomic():
        made: list[AgentInstance] = []
        if instance.pk is None:  # a new address: its first message makes the row
            instance, made = registry.make_in_transaction(instance)
        admitted = _accept(instance, request, origin_channel, user, claim_as=liveness.worker_label(channel))
        if admitted.dropped:
            return instance, made, admitted, None
        if admitted.claimed:
            assert admitted.turn is not None
            return instance, made, admitted, engine.inserted_claimed(
                admitted.turn, admitted.transcript, admitted.mcp_servers, admitted.stream_pk)
        try:
            with transaction.atomic():
                return instance, made, admitted, engine.claim_next_or_latest(instance.pk, channel, admitted.transcript)
        except Exception:
            logger.exception("The queue of %s could not be looked at after an admission", instance)
            return instance, made, admitted, None


def admit(instance: AgentInstance, request: ChatRequest, origin_channel: str = "", user: Any = None
          ) -> admission.Admission:
    """Store a chat request's messages and queue its turn, as the agent's ``message_concurrency``
    says (``turns.admission``); runs nothing.

    A request that came over HTTP (``conversations.send_message``, no origin channel) has no
    event loop that outlives it to run the turn on: its caller hands the queue to a worker
    (``dispatch.DRAIN_INSTANCE``). Raises ``ProtocolError`` as ``submit_chat``.
    """
    admission.check_readable(request.messages, request.request_id, instance)
    return _accept(instance, request, origin_channel, user)


def _accept(instance: AgentInstance, request: ChatRequest, origin_channel: str, user: Any,
            claim_as: str | None = None) -> admission.Admission:
    """``admission.accept_chat`` under the agent's concurrency and storage policy (messages checked)."""
    agent = registry.agent_for(instance)
    return admission.accept_chat(instance, request, origin_channel, user, agent.message_concurrency,
                                 transcript.Policy.of(agent), claim_as=claim_as)


async def clear(instance: AgentInstance, origin_channel: str) -> None:
    """Delete the transcript; skip queued turns, abort the running one; tell other connections."""
    await _reset(instance, delete_history=True)
    await fanout.publish(instance.pk, frames.chat_clear(), exclude=[origin_channel])
    events.emit_chat(instance, events.MESSAGE_CLEAR)


async def reset_turn_state(instance: AgentInstance) -> None:
    """Skip queued turns and abort the running one; the transcript stays."""
    await _reset(instance, delete_history=False)


async def _reset(instance: AgentInstance, *, delete_history: bool) -> None:
    running = await database_sync_to_async(_bump_generation)(instance, delete_history)
    for turn in running:
        await control.cancel_running(liveness.control_channel(turn), turn.pk, "Chat cleared")


def _bump_generation(instance: AgentInstance, delete_history: bool) -> list[Turn]:
    """A new generation: queued turns of the old one are skipped when claimed."""
    with transaction.atomic():
        AgentInstance.objects.filter(pk=instance.pk).update(
            generation=F("generation") + 1, terminal_request_id="", terminal_error=""
        )
        if delete_history:
            transcript.clear(instance)
            buffer.delete_all(instance)
        running = list(Turn.objects.of(instance).running())
        Turn.objects.of(instance).running().update(cancel_requested=True)
    return running


async def has_pending_interaction(instance: AgentInstance) -> bool:
    """An assistant message has a part waiting on the user (an approval or a tool result)."""
    return await database_sync_to_async(_has_pending_interaction)(instance)


def _has_pending_interaction(instance: AgentInstance) -> bool:
    return any(
        awaits_interaction(part)
        for message in transcript.load(instance) if message.get("role") == "assistant"
        for part in message.get("parts", [])
    )


# How often wait_until_stable looks again (seconds).
STABLE_POLL_SECONDS = 0.05


async def wait_until_stable(instance: AgentInstance, timeout: float) -> bool:  # noqa: ASYNC109 - returns False at the deadline
    """True once no turn is queued or running and nothing waits on the user; False at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await database_sync_to_async(_stable)(instance):
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(STABLE_POLL_SECONDS)


def _stable(instance: AgentInstance) -> bool:
    """Nothing waits on the user, then no turn is queued or running, read in this order in one hop:
    an answer and the continuation it queues are stored together, so a look between the two reads
    sees the continuation (and a turn stores what it asks the user before it ends)."""
    return not _has_pending_interaction(instance) and not Turn.objects.of(instance).active().exists()


async def replace_messages(instance: AgentInstance, messages: list[UIMessage], origin_channel: str) -> None:
    """Client-pushed ``cf_agent_chat_messages`` (``setMessages``): persist, tell the others."""
    policy = transcript.Policy.of(registry.agent_for(instance))
    merged = await database_sync_to_async(_replace)(instance, messages, policy)
    await fanout.publish(instance.pk, frames.chat_messages(merged), exclude=[origin_channel])


def _replace(instance: AgentInstance, messages: list[UIMessage], policy: transcript.Policy) -> list[UIMessage]:
    admission.check_readable(messages, instance=instance)
    return transcript.persist(instance, messages, policy=policy)


def queued_instances() -> list[int]:
    """Instances with queued turns: the beat task re-drains them in case no process is on it."""
    return list(Turn.objects.queued().values_list("instance_id", flat=True).distinct())


async def recover_interrupted(*, now: datetime | None = None, here: bool = True) -> int:
    """Cut every running turn whose process is gone and run its recovery and what is queued behind it
    (and recovery attempts left unclaimed, their process having died before it could run them).

    ``here``: in this process (the beat sweep, on a worker); otherwise where ``AGENT_RECOVERY``
    says. Returns how many turns this process cut.
    """
    now = now or timezone.now()
    cuts = await recovery.recover_interrupted(now=now)
    instances = dict.fromkeys(cut.turn.instance_id for cut in cuts)
    instances.update(dict.fromkeys(await database_sync_to_async(recovery.unclaimed_attempts)(now)))
    # Side by side: one slow recovery must not hold up the others.
    if here:
        await asyncio.gather(*(drain(pk) for pk in instances))
    else:
        await run_recovery(*instances)
    return len(cuts)


async def recover_turn(turn: Turn) -> None:
    """Cut ``turn``, whose process is gone, and run its recovery attempt (``AGENT_RECOVERY``)."""
    won = await recovery.recover(turn)
    if won is not None:
        await run_recovery(turn.instance_id)


async def recover_stream(stream_pk: int) -> None:
    """A stream whose writer is gone (a reconnecting client found it): cut its turn, recover it."""
    won = await recovery.recover_stream(stream_pk)
    if won is not None:
        await run_recovery(won.turn.instance_id)


async def run_recovery(*instance_pks: int) -> None:
    """Run each instance's queue, whose next turn is a recovery attempt: on a Celery worker
    (``AGENT_RECOVERY = "celery"``, the default; all sent in one thread hop) or in this process
    (``"inline"``)."""
    if conf.get("AGENT_RECOVERY") == "celery":
        await dispatch.enqueue_each(dispatch.DRAIN_INSTANCE, [(pk,) for pk in instance_pks])
    else:
        for pk in instance_pks:
            start_drain(pk)


_startup_sweep: asyncio.Task[int] | None = None


def sweep_on_startup() -> None:
    """Once per process, look for turns a crash left running (Daphne calls it on its first connection)."""
    global _startup_sweep
    if _startup_sweep is None:
        _startup_sweep = asyncio.ensure_future(recover_interrupted(here=False))


