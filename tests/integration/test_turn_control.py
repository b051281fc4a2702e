"""``turns.control``: a cancel that reaches a process before its turn listens is kept for the turn.

A claimed turn reads its cancel flag in the same database hop as its claim, then starts
listening on its process's control channel; a cancel sent in between must still stop it.
"""

import asyncio

from channels.layers import get_channel_layer

from agents_app.abort import AbortSignal
from agents_app.turns import control


async def test_a_cancel_sent_here_before_the_turn_listens_aborts_it_when_it_does() -> None:
    try:
        channel = await control.channel_name()
        await control.cancel_running(channel, 9_000_001, "Stopped early")
        signal = AbortSignal()
        async with control.listening(9_000_001, signal):
            assert signal.aborted
        later = AbortSignal()
        async with control.listening(9_000_002, later):
            assert not later.aborted
    finally:
        await control.shutdown()


async def test_a_cancel_from_another_process_before_the_turn_listens_aborts_it_when_it_does() -> None:
    try:
        channel = await control.channel_name()
        await get_channel_layer().send(channel, {"type": control.CANCEL_EVENT, "turn": 9_000_003, "reason": "Remote"})
        kept = control.early_cancels()
        while 9_000_003 not in kept:  # the receive loop takes it off the layer
            await asyncio.sleep(0.001)
        signal = AbortSignal()
        async with control.listening(9_000_003, signal):
            assert signal.aborted
        assert 9_000_003 not in kept
    finally:
        await control.shutdown()


async def test_kept_cancels_are_bounded() -> None:
    try:
        channel = await control.channel_name()
        for turn_pk in range(control.EARLY_CANCELS_KEPT + 10):
            await control.cancel_running(channel, turn_pk)
        kept = control.early_cancels()
        assert len(kept) == control.EARLY_CANCELS_KEPT
        assert next(iter(kept)) == 10  # the oldest went first
    finally:
        await control.shutdown()
