"""What recovery hooks are told, and the wait for a stable conversation (docs/architecture.md#attempt).

Crashes are simulated as in ``test_chat_recovery`` (a turn left running by a process that does not
exist); the real ``kill -9`` and out-of-memory kills are in ``tests/crossprocess``.
"""

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from agents_app import ChatRecovery, transcript, turns
from agents_app.models import RecoveryIncident, Turn
from agents_app.recovery import service as recovery
from agents_app.recovery.policy import ChatRecoveryContext, ChatRecoveryProgressContext, Kind
from tests.agents import RECOVERY_CALLS, RecoveryAgent
from tests.integration.test_chat_recovery import WHOLE, attempt_dies, crash, instance_of, replies, text_chunks
from tests.support.waiting import eventually

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    RECOVERY_CALLS.clear()
    monkeypatch.setattr(RecoveryAgent, "recovery_options", {})
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", True)


async def incident() -> RecoveryIncident:
    return await RecoveryIncident.objects.aget()


# -------------------------------------------------------------------- should_keep_recovering's context
async def test_should_keep_recovering_is_told_the_work_done_and_the_incidents_age(user, monkeypatch):
    """The predicate gets a progress context: the incident and attempt, the recovery kind, the work done since
    the incident opened (content produced by the cut turn and its attempts) and how old the incident is, so a
    token or time budget can be written against it.
    """
    seen: list[ChatRecoveryProgressContext] = []

    def keep(ctx: ChatRecoveryProgressContext) -> bool:
        seen.append(ctx)
        return True

    monkeypatch.setattr(RecoveryAgent, "chat_recovery", ChatRecovery(should_keep_recovering=keep))
    handle = await instance_of(user, "progress")
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 ", "w1 "))
    await recovery.recover_interrupted()
    await RecoveryIncident.objects.aupdate(created_at=timezone.now() - timedelta(seconds=30))
    await attempt_dies()
    await turns.drain(handle.instance.pk)
    [ctx] = seen
    assert isinstance(ctx, ChatRecoveryProgressContext)
    assert (ctx.incident_id, ctx.recovery_root_request_id, ctx.attempt, ctx.max_attempts) == (
        "r-cut:u-r-cut", "r-cut", 2, 10)
    died = await Turn.objects.aget(kind=Turn.Kind.RECOVERY, status=Turn.Status.ABORTED)
    assert ctx.recovery_kind == Kind.CONTINUE and ctx.request_id == died.request_id  # the turn cut last
    assert ctx.work == 2  # the two text deltas of the cut turn; the attempt that died produced none
    assert 30 <= ctx.age < 120


# -------------------------------------------------------------------------- on_chat_recovery's created_at
class StaleGuardAgent(RecoveryAgent):
    """The reference's staleness guard, ported as is: do not continue a turn orphaned for over two minutes."""

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> dict[str, bool]:
        RECOVERY_CALLS.setdefault(self.name, []).append(ctx)
        if timezone.now() - ctx.created_at > timedelta(minutes=2):
            return {"continue": False}
        return {}


with_stale_guard = override_settings(AGENT_CLASSES=[*settings.AGENT_CLASSES,
                                                    "tests.integration.test_recovery_context.StaleGuardAgent"])


@with_stale_guard
@pytest.mark.parametrize(("started_ago", "continued"), [(600, False), (5, True)])
async def test_created_at_is_the_interrupted_turns_start_so_a_staleness_check_ports_as_is(
        user, started_ago: float, continued: bool):
    """``created_at`` is when the interrupted turn began: a turn cut long ago is kept as it stands (its partial
    stored, not continued), a fresh one is continued.
    """
    handle = await instance_of(user, f"stale-{started_ago}", StaleGuardAgent)
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "), started_ago=started_ago)
    await turns.recover_interrupted()
    [ctx] = RECOVERY_CALLS[f"stale-{started_ago}"]
    cut_turn = await Turn.objects.aget(request_id="r-cut")
    assert ctx.created_at == cut_turn.started_at
    found = await incident()
    if continued:
        assert (found.status, await replies(handle)) == ("completed", [WHOLE])
    else:
        assert (found.status, found.reason, await replies(handle)) == ("skipped", "continue_disabled", ["w0 "])


# ---------------------------------------------------------------------------------- stable_timeout
def earlier_approval(instance: Any) -> None:
    """An earlier exchange whose reply still asks the user to approve a call (``demo_x``)."""
    transcript.save_message(instance, {"id": "u-old", "role": "user", "parts": [{"type": "text", "text": "mail"}]})
    transcript.save_message(instance, {"id": "a-old", "role": "assistant", "parts": [{
        "type": "tool-send_email", "toolCallId": "demo_x", "state": "approval-requested",
        "input": {"to": "a@b.c"}, "approval": {"id": "demo_x"}}]})


def approve_earlier(instance: Any) -> None:
    def approved(part: dict[str, Any]) -> dict[str, Any]:
        return {**part, "state": "approval-responded", "approval": {"id": "demo_x", "approved": True}}

    transcript.update_tool_part(instance, lambda part: part.get("toolCallId") == "demo_x", approved)


async def test_an_attempt_parks_when_another_message_still_waits_on_the_user_after_stable_timeout(user, monkeypatch):
    """Before it goes on, a recovery waits (up to ``stable_timeout``) for the conversation to be stable. If an
    approval or client tool call is still unanswered then, it parks as one waiting on the user: the partial is
    kept, nothing is re-run, and the incident ends skipped without spending the budget.
    """
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", {"stable_timeout": 0.3})
    handle = await instance_of(user, "unstable")
    await database_sync_to_async(earlier_approval)(handle.instance)
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "))
    await turns.recover_interrupted()
    found = await incident()
    assert (found.status, found.reason, found.attempt) == ("skipped", "awaiting_interaction", 1)
    assert await replies(handle) == ["", "w0 "]


async def test_an_attempt_goes_on_once_the_user_answers_within_stable_timeout(user, monkeypatch):
    """An answer that arrives while the recovery waits makes the conversation stable: the cut turn is continued."""
    monkeypatch.setattr(RecoveryAgent, "chat_recovery", {"stable_timeout": 60})
    handle = await instance_of(user, "settles")
    await database_sync_to_async(earlier_approval)(handle.instance)
    await database_sync_to_async(crash)(handle.instance, chunks=text_chunks("w0 "))
    task = asyncio.ensure_future(turns.recover_interrupted())

    async def asked() -> bool:
        return bool(RECOVERY_CALLS.get("settles"))

    await eventually(asked, "on_chat_recovery to be asked", timeout=30)
    assert not task.done()
    await database_sync_to_async(approve_earlier)(handle.instance)
    await task
    assert (await incident()).status == "completed"
    [_earlier, continued] = await replies(handle)
    assert continued.startswith("w0 ") and len(continued) > len("w0 ")  # the cut reply, gone on in place
