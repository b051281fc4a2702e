"""Recovery by provider in one process: a reply cut mid-stream goes on as its model's provider allows.

A crash is simulated as ``tests/integration/test_chat_recovery.py`` does (a turn left running by a
dead process, with the chunks it stored); the demo agent's ``AGENT_MODEL`` points at a local
provider server. What each strategy sends (``agents_app/llm/recovery.py``) is asserted at the
server. The same with ``kill -9`` of real processes: ``tests/crossprocess/test_provider_recovery.py``.
"""

from collections.abc import Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async

from agents_app import transcript, turns
from agents_app.demo.agents import DemoAgent
from agents_app.llm.recovery import CONTINUE_PROMPT, RESPONSE_ID_KEY
from agents_app.models import RecoveryIncident
from tests.integration.test_chat_recovery import crash, text_chunks
from tests.support.fake_provider import TextReply
from tests.support.frames import message_text
from tests.support.provider_protocols import PROTOCOLS, running

pytestmark = pytest.mark.django_db(transaction=True)

PARTIAL = ["Once ", "upon "]
WHOLE = "Once upon a time."


@pytest.fixture(params=list(PROTOCOLS))
def protocol_server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with running(request.param, monkeypatch) as running_server:
        yield running_server


async def recover(user: Any, chunks: list[dict[str, Any]]) -> str:
    """Cut a demo-agent turn after ``chunks``, recover it; the stored reply's text."""
    handle = await DemoAgent.aget("story", owner=user)
    await database_sync_to_async(crash)(handle.instance, text="Tell me a story", chunks=chunks)
    assert await turns.recover_interrupted() == 1
    assert (await RecoveryIncident.objects.aget()).status == "completed"
    stored = await database_sync_to_async(transcript.load)(handle.instance)
    assert [m["role"] for m in stored] == ["user", "assistant"]
    return message_text(stored[1])


def ends_of(protocol: Any, request: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The request's last two messages, role and text, whatever the protocol's format."""
    if protocol.key == "openai-responses":
        items = [i for i in request.body["input"] if i.get("role")]
    else:
        items = request.body["messages"]

    def plain(message: dict[str, Any]) -> dict[str, Any]:
        content = message["content"]
        if not isinstance(content, str):
            content = "".join(b.get("text", "") for b in content)
        return {"role": message["role"], "text": content}

    return plain(items[-2]), plain(items[-1])


async def test_a_cut_reply_goes_on_as_the_provider_allows(protocol_server: Any, user: Any) -> None:
    protocol, server = protocol_server
    chunks = text_chunks(*PARTIAL)
    if protocol.key == "openai-responses":
        # The cut reply had recorded its response, which completed on the server meanwhile.
        response_id = server.complete(TextReply(["Once ", "upon ", "a time."]), protocol.model_name)
        chunks.insert(1, {"type": "message-metadata", "messageMetadata": {RESPONSE_ID_KEY: response_id}})
    else:
        server.script(TextReply(["a time."]))

    assert await recover(user, chunks) == WHOLE

    if protocol.key == "openai-responses":
        # retrieve: nothing generated again, the stored response fetched once.
        assert server.requests == []
        assert server.retrievals == [response_id]
        return
    [request] = server.requests
    partial, last = ends_of(protocol, request)
    assert partial == {"role": "assistant", "text": "".join(PARTIAL)}
    # synthetic (Anthropic, OpenAI Chat and compatible servers): an ephemeral user message asks for
    # the rest; it is not stored (the transcript is the user's message and the one reply).
    assert last == {"role": "user", "text": CONTINUE_PROMPT}


async def test_an_agent_may_choose_its_strategy(protocol_server: Any, user: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    protocol, server = protocol_server
    monkeypatch.setattr(DemoAgent, "recovery_strategy", "prefill")
    server.script(TextReply(["a time."]))

    assert await recover(user, text_chunks(*PARTIAL)) == WHOLE

    [request] = server.requests
    *_, (role, text) = [tuple(m.values()) for m in ends_of(protocol, request)]
    assert (role, text) == ("assistant", "".join(PARTIAL)), "prefill: the request ends with the partial reply"


async def test_a_response_that_cannot_be_fetched_is_continued_instead(user: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with running("openai-responses", monkeypatch) as (protocol, server):
        server.script(TextReply(["a time."]))
        chunks = text_chunks(*PARTIAL)
        chunks.insert(1, {"type": "message-metadata", "messageMetadata": {RESPONSE_ID_KEY: "resp_gone"}})

        assert await recover(user, chunks) == WHOLE

        [request] = server.requests
        assert ends_of(protocol, request)[1] == {"role": "user", "text": CONTINUE_PROMPT}
