"""The demo's refund_order is idempotent end to end: a run the ledger repeats after a crash makes no second refund.

The crash is the one of issue 17: the refund committed, the process died before the ledger row
settled; after the lease a retry of the same keyed call reclaims the row and runs ``execute`` again.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents_app.demo.models import Refund
from agents_app.models import LedgerEntry
from tests.support.frames import chat_request, is_done, open_agent, receive_until, user_message

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/agents/demo-agent/refunds"
CALL = '/tool refund_order {"order_id": "A1", "amount": 50}'
KEY = "action:refund_order:refund:A1"


def tool_output(frames: list[dict]) -> dict:
    import json

    for frame in frames:
        if frame.get("body") and not frame.get("done"):
            chunk = json.loads(frame["body"])
            if chunk.get("type") == "tool-output-available":
                return chunk["output"]
    raise AssertionError("no tool output")


async def test_a_retry_after_a_crash_past_the_lease_finds_the_first_refund(ws):
    a = await open_agent(ws, PATH)
    await a.send_json_to(chat_request("r1", [user_message("u1", CALL)]))
    first = tool_output(await receive_until(a, is_done("r1")))
    made = await Refund.objects.aget()
    assert (made.idempotency_key, first["refund_id"]) == (KEY, made.pk)
    # As a process that died between the refund's commit and the ledger's settle leaves it.
    stale = timezone.now() - timedelta(minutes=10)
    assert await LedgerEntry.objects.filter(key=KEY).aupdate(
        status=LedgerEntry.Status.PENDING, result_json="", updated_at=stale) == 1
    await a.send_json_to(chat_request("r2", [user_message("u2", CALL)]))
    second = tool_output(await receive_until(a, is_done("r2")))
    assert second == first
    assert await Refund.objects.acount() == 1
    assert (await LedgerEntry.objects.aget(key=KEY)).status == LedgerEntry.Status.SETTLED
