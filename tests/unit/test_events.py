"""The reference's observability channels: which channel carries which event (docs/architecture.md#events)."""

import pytest

from agents_app import events


@pytest.mark.parametrize(("name", "channel"), [
    ("chat:turn:start", "chat"),
    ("chat:recovery:exhausted", "chat"),
    ("chat:transcript:repaired", "transcript"),
    ("message:request", "message"),
    ("tool:approval", "message"),
    ("action:invoked", "message"),
    ("action:ledger:settled", "message"),
    ("schedule:execute", "schedule"),
    ("rpc", "rpc"),
    ("mcp:client:connect", "mcp"),
    ("connect", "lifecycle"),
    ("destroy", "lifecycle"),
])
def test_each_event_goes_to_the_reference_channel(name: str, channel: str) -> None:
    """The reference routes an event to a channel by its name's prefix: ``chat:`` to chat (but its transcript
    repairs to transcript), messages, tool answers and actions to message, and what has no prefix of its own
    (connect, disconnect, destroy) to lifecycle.
    """
    assert events.channel_of(name) == channel
    assert channel in events.CHANNELS


def test_a_channel_subscriber_gets_only_its_channel_and_a_prefix_subscriber_only_its_prefix() -> None:
    """The reference publishes each event on one named channel, and a subscriber listens to a channel.
    A channel subscriber gets that channel's events only; a subscription by name prefix (ours) gets
    only the events its prefix starts; unsubscribing twice is harmless."""
    seen: list[tuple[str, str]] = []
    stops = [events.subscribe("schedule", lambda name, data: seen.append(("schedule", name))),
             events.subscribe("chat:turn:", lambda name, data: seen.append(("prefix", name)))]
    try:
        for name in ("schedule:create", "chat:turn:start", "chat:recovery:detected", "message:clear"):
            events.emit(name)
    finally:
        for stop in stops:
            stop()
            stop()  # twice is harmless
    assert seen == [("schedule", "schedule:create"), ("prefix", "chat:turn:start")]


@pytest.mark.parametrize("arguments", [("chat",), ("", print), ("chat", "not callable")])
def test_subscribe_refuses_what_it_cannot_call(arguments: tuple[object, ...]) -> None:
    """A subscription without a callable, or with an empty channel or prefix (which would match every
    event), is a TypeError at once, not an error later when an event is emitted to it."""
    with pytest.raises(TypeError):
        events.subscribe(*arguments)  # type: ignore[call-overload]
