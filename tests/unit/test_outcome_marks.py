"""``messages.mark_outcome``: how a reply's turn ended, kept in its metadata beside the agent's own keys."""

from agents_app.messages import mark_outcome
from agents_app.protocol.types import Outcome


def reply(**metadata: object) -> dict[str, object]:
    message: dict[str, object] = {"id": "m1", "role": "assistant", "parts": [{"type": "text", "text": "hi"}]}
    if metadata:
        message["metadata"] = dict(metadata)
    return message


def test_an_error_is_marked_with_its_text_beside_the_other_metadata() -> None:
    message = reply(finishReason="stop")
    mark_outcome(message, Outcome.ERROR.value, "boom")
    assert message["metadata"] == {"finishReason": "stop", "outcome": "error", "errorText": "boom"}


def test_a_stop_replaces_an_earlier_error_mark() -> None:
    message = reply(outcome="error", errorText="boom", attachments=[])
    mark_outcome(message, Outcome.ABORTED.value)
    assert message["metadata"] == {"attachments": [], "outcome": "aborted"}


def test_a_normal_end_clears_the_mark_and_keeps_the_rest() -> None:
    message = reply(outcome="aborted", continuation=True)
    mark_outcome(message, None)
    assert message["metadata"] == {"continuation": True}


def test_a_normal_end_leaves_an_unmarked_message_as_it_was() -> None:
    for message in (reply(), reply(finishReason="stop"), {**reply(), "metadata": None}):
        before = dict(message)
        mark_outcome(message, None)
        assert message == before
