"""Parking a durable-pause call: the part of a durable pause that runs inside a turn.

A ``durable-pause`` action does not wait on a socket. Its call is *parked*: a ``PendingApproval``
row holds the input and the descriptor, the model reads the paused envelope, and the turn ends.
Deciding the call later (admin, REST API, Python) is ``agents_app.approvals.service``' job
(docs/architecture.md#durable-pause).
"""

import uuid
from typing import Any, Final

from django.utils import timezone

from .. import events
from .context import ActionContext, TurnState
from .descriptor import Action, approval_descriptor

# Prefix of every execution id.
EXECUTION_PREFIX: Final = "actpause_"
# What the model reads in place of the output of a parked call (the reference's exact string).
PAUSED_MESSAGE: Final = (
    "This action is awaiting human approval. Stop and wait for the approval result before proceeding."
)


def paused_envelope(execution_id: str, action_name: str) -> dict[str, Any]:
    """What the model reads for a parked call, and what its tool part holds until it is decided."""
    return {"status": "paused", "executionId": execution_id, "action": action_name, "message": PAUSED_MESSAGE}


async def park(turn: TurnState[Any], action: Action[Any], input: Any, ctx: ActionContext,
               permissions: list[str]) -> dict[str, Any]:
    """Park one call of a durable-pause action (authorized already); returns the paused envelope.

    The descriptor rides on the turn (``parked_descriptors``) so the engine shows it on the
    call's ``tool-output-available`` chunk, and the part is stored at once for a quick decider.
    """
    from ..models import PendingApproval  # this package is imported by agent modules, before apps are ready

    assert action.name is not None
    execution_id = EXECUTION_PREFIX + str(uuid.uuid4())
    descriptor = approval_descriptor(action, request_id=ctx.request_id, tool_call_id=ctx.tool_call_id,
                                     input=input, permissions=permissions)
    instance = turn.agent.instance
    await PendingApproval.objects.acreate(
        execution_id=execution_id, instance_id=instance.pk, agent=instance.slug, action_name=action.name,
        tool_call_id=ctx.tool_call_id, request_id=ctx.request_id, input=descriptor["input"], descriptor=descriptor,
        risk=descriptor.get("risk", ""), summary=descriptor["summary"],
        # Who asked: the turn's user, else (a programmatic turn) the owner of the conversation.
        requested_by_id=getattr(turn.user, "pk", None) or instance.owner_id, created_at=timezone.now(),
    )
    events.emit(events.PAUSE_CREATED, action=action.name, executionId=execution_id, toolCallId=ctx.tool_call_id)
    turn.parked_descriptors[ctx.tool_call_id] = descriptor
    return paused_envelope(execution_id, action.name)
