"""``continue_last_turn`` turns are continuations as agents see them: ``self.continuation`` in
``on_chat_message``, ``authorize_turn(turn).continuation`` and ``on_chat_response(result).continuation``
say True, as the reply's ``metadata.continuation`` does (a turn answering a new message says False)."""

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from agents_app.actions.context import TurnContext
from agents_app.agent import ChatResponseResult
from agents_app.demo.agents import DemoAgent

pytestmark = pytest.mark.django_db(transaction=True)

SEEN: dict[str, list[tuple[str, bool]]] = {}


class ContinuationProbeAgent(DemoAgent):
    """The demo agent, noting what each public hook is told about ``continuation``."""

    def _seen(self, hook: str, continuation: bool) -> None:
        SEEN.setdefault(self.name, []).append((hook, continuation))

    async def authorize_turn(self, turn: TurnContext) -> dict[str, object]:
        self._seen("authorize_turn", turn.continuation)
        return await super().authorize_turn(turn)

    async def on_chat_message(self) -> Any:
        self._seen("on_chat_message", self.continuation)
        return await super().on_chat_message()

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        self._seen("on_chat_response", result.continuation)


async def test_continue_last_turn_is_a_continuation_for_every_hook(user):
    with override_settings(AGENT_CLASSES=[*settings.AGENT_CLASSES, f"{__name__}.ContinuationProbeAgent"]):
        handle = await ContinuationProbeAgent.aget("probe", owner=user)
        assert (await handle.save_messages(["hello"])).status == "completed"
        assert (await handle.continue_last_turn()).status == "completed"
    hooks = ["on_chat_message", "authorize_turn", "on_chat_response"]
    assert SEEN.pop("probe") == [(h, False) for h in hooks] + [(h, True) for h in hooks]
