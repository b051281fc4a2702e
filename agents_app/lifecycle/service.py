"""``destroy()``: an instance's end, as the reference Agent's ``destroy()`` (docs/architecture.md#destroy).

The reference aborts the instance's requests, then deletes all of its storage (tables, alarms)
and closes its sockets; the next request meets a fresh, empty agent. Here: the instance's turns
(and its sub-agents') are cancelled as a clear does, the running ones are given a moment to
write their end, then the instance's row is deleted with everything that hangs on it (transcript,
turns, stream buffers, schedules and their runs, parked approvals, recovery incidents, sub-agents)
and its ledger rows, in one transaction. Every socket of it is told (``cf_agent_chat_clear``) and
closed with ``DESTROYED_CLOSE_CODE``, so a client reconnects to an empty conversation. Staff
decisions already taken keep their audit rows (their instance becomes empty).
"""

import asyncio
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import transaction

from .. import turns, waits
from ..models import AgentInstance, LedgerEntry, Turn
from ..protocol import frames
from ..streaming import fanout

logger = logging.getLogger("agents_app.lifecycle.service")

# The channel-layer event that closes the sockets of a destroyed instance (``ChatConsumer.agent_destroyed``).
DESTROYED_EVENT = "agent.destroyed"
# A normal close: the npm client reconnects, and meets the empty conversation the address now names
# (1001 "going away" would say the same, but Daphne sends only 1000 and 3000-4999).
DESTROYED_CLOSE_CODE = 1000
DESTROYED_REASON = "destroyed"
# How long running turns get to end after their cancel before their rows go anyway (a turn of a
# dead process never ends by itself).
SETTLE_SECONDS = 10.0
POLL_SECONDS = 0.05


@dataclass(frozen=True)
class Destroyed:
    """What ``destroy`` removed: instances (the one and its sub-agents), messages, turns, ledger rows."""

    instances: int
    messages: int
    turns: int
    ledger_rows: int


def family(instance: AgentInstance) -> list[AgentInstance]:
    """The instance and every sub-agent under it, parents first."""
    found, level = [instance], [instance.pk]
    while level:
        children = list(AgentInstance.objects.filter(parent_id__in=level))
        found += children
        level = [child.pk for child in children]
    return found


async def destroy(instance: AgentInstance, *, settle_seconds: float = SETTLE_SECONDS) -> Destroyed:
    """Cancel the instance's turns, then delete it and all it stored; tell and close its sockets."""
    members = await database_sync_to_async(family)(instance)
    pks = [member.pk for member in members]
    for member in members:
        await turns.reset_turn_state(member)
    if not await _settled(pks, settle_seconds):
        logger.warning("Turns of %s still run after their cancel; deleting them anyway", instance)
    removed = await database_sync_to_async(_delete)(instance, pks)
    layer = get_channel_layer()
    for pk in pks:
        await fanout.publish(pk, frames.chat_clear())
        await layer.group_send(fanout.group_name(pk), {"type": DESTROYED_EVENT})
    logger.info("Destroyed %s: %s", instance, removed)
    return removed


async def _settled(pks: list[int], seconds: float) -> bool:
    """Wait until no turn of the instances runs; False at the deadline."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    running = Turn.objects.filter(instance_id__in=pks, status=Turn.Status.RUNNING)
    with waits.watching(pks) as watch:
        while True:
            if not await running.aexists():
                return True
            if loop.time() >= deadline:
                return False
            await watch.apause(POLL_SECONDS, at_most=deadline - loop.time())


def _delete(instance: AgentInstance, pks: list[int]) -> Destroyed:
    with transaction.atomic():
        ledger, _ = LedgerEntry.objects.filter(scope__in=[str(pk) for pk in pks]).delete()
        _, by_model = AgentInstance.objects.filter(pk=instance.pk).delete()
    return Destroyed(
        instances=by_model.get("agents_app.AgentInstance", 0),
        messages=by_model.get("agents_app.ChatMessage", 0),
        turns=by_model.get("agents_app.Turn", 0),
        ledger_rows=ledger,
    )
