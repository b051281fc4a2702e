"""Resume across real server processes: reconnect elsewhere, drops at random points, kill -9."""

import asyncio
import json
import random
import signal

import pytest

from tests.support.frames import chat_request, user_message
from tests.support.wsclient import open_socket, recv_json

pytestmark = pytest.mark.crossprocess


class Reader:
    """What a client rebuilds: the reply text, restarted by every replayed ``start`` chunk."""

    def __init__(self) -> None:
        self.text = ""
        self.done: dict | None = None
        self.deltas_seen = 0

    def feed(self, frame: dict) -> None:
        if frame.get("type") != "cf_agent_use_chat_response":
            return
        if frame.get("done"):
            self.done = frame
            return
        if not frame.get("body") or frame.get("error"):
            return
        chunk = json.loads(frame["body"])
        if chunk["type"] == "start" and frame.get("replay"):
            self.text = ""
        elif chunk["type"] == "text-delta":
            self.text += chunk["delta"]
            self.deltas_seen += 1


async def reconnect(daphne, path, cookie, reader, request_id="r1"):
    """Open a socket, probe, ACK once; returns the socket positioned after the ACK.

    If the reply finished while we were away the probe says ``idle``, and a late ACK for our
    request gets only the empty replayed ``done`` (docs/protocol.md#late-ack): the client shows
    the stored reply, which it fetches on connect (``get-messages``) as ``useAgentChat`` does.
    """
    sock = await open_socket(daphne.ws, path, cookie)
    await sock.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
    while True:
        frame = await recv_json(sock)
        if frame["type"] in ("cf_agent_stream_resuming", "cf_agent_stream_resume_none") and "probeId" in frame:
            assert frame.get("id", request_id) == request_id
            if frame["type"] == "cf_agent_stream_resume_none":
                reader.text = daphne.get_json(f"{path}/get-messages", cookie)[-1]["parts"][-1]["text"]
            await sock.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": request_id}))
            return sock


def expected(count):
    return "".join(f"w{i} " for i in range(count))


def test_reconnect_to_another_process_mid_stream(stack):
    stack.create_user("alice")
    first, second = stack.start_server(), stack.start_server()
    cookie = first.login("alice")
    path = "/agents/demo-agent/elsewhere"

    async def scenario():
        reader = Reader()
        sock = await open_socket(first.ws, path, cookie)
        await sock.send(json.dumps(chat_request("r1", [user_message("u1", "/slow 200 5")])))
        while reader.deltas_seen < 40:
            reader.feed(await recv_json(sock))
        await sock.close()
        sock = await reconnect(second, path, cookie, reader)
        while reader.done is None:
            reader.feed(await recv_json(sock))
        await sock.close()
        assert reader.text == expected(200)
        assert reader.done["id"] == "r1"

    asyncio.run(scenario())
    history = second.get_json(f"{path}/get-messages", cookie)
    assert history[-1]["parts"][-1]["text"] == expected(200)


def test_drops_at_a_hundred_random_points_lose_and_duplicate_nothing(stack):
    stack.create_user("alice")
    daphnes = [stack.start_server(), stack.start_server()]
    cookie = daphnes[0].login("alice")
    path = "/agents/demo-agent/flaky"
    rng = random.Random(20261129)

    async def scenario():
        reader = Reader()
        sock = await open_socket(daphnes[0].ws, path, cookie)
        await sock.send(json.dumps(chat_request("r1", [user_message("u1", "/slow 500 40")])))
        drops = 0
        # Each drop comes a random 1-4 live frames after the previous (re)connection caught up.
        budget = rng.randint(1, 4)
        while reader.done is None:
            frame = await recv_json(sock, timeout=20)
            reader.feed(frame)
            if not frame.get("replay"):
                budget -= 1
            if budget == 0 and drops < 100 and reader.done is None:
                await sock.close()
                drops += 1
                sock = await reconnect(daphnes[drops % 2], path, cookie, reader)
                budget = rng.randint(1, 4)
        await sock.close()
        return reader, drops

    reader, drops = asyncio.run(scenario())
    assert drops == 100
    assert reader.text == expected(500)
    history = daphnes[0].get_json(f"{path}/get-messages", cookie)
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[-1]["parts"][-1]["text"] == expected(500)


def test_kill_minus_nine_then_reconnect_replays_the_partial_and_a_worker_continues_it(stack):
    """An orphaned stream (docs/protocol.md#orphaned-streams) across processes: the reconnecting client
    gets the stored part of the cut reply (ending ``aborted``), then the recovery, run by the Celery
    worker, continues it live."""
    stack.create_user("alice")
    doomed, survivor = stack.start_server(), stack.start_server()
    stack.start_celery_worker()
    cookie = survivor.login("alice")
    path = "/agents/demo-agent/killed"

    async def scenario():
        reader = Reader()
        # The survivor's first connection sweeps for dead turns: make it happen before the kill,
        # so that the reconnect below finds the cut stream itself (docs/protocol.md#orphaned-streams).
        bystander = await open_socket(survivor.ws, "/agents/demo-agent/bystander", cookie)
        sock = await open_socket(doomed.ws, path, cookie)
        await sock.send(json.dumps(chat_request("r1", [user_message("u1", "/slow 400 10")])))
        while reader.deltas_seen < 60:
            reader.feed(await recv_json(sock))
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
        sock = await reconnect(survivor, path, cookie, Reader())
        await bystander.close()
        replay = Reader()
        while replay.done is None:
            replay.feed(await recv_json(sock))
        after = []
        while not (after and after[-1].get("type") == "cf_agent_chat_recovering" and not after[-1]["recovering"]):
            after.append(await recv_json(sock, timeout=60))
        await sock.close()
        return reader, replay, after

    reader, replay, after = asyncio.run(scenario())
    assert replay.done == {"body": "", "done": True, "id": "r1", "type": "cf_agent_use_chat_response",
                           "replay": True, "outcome": "aborted"}
    # What was stored before the kill: chunks flushed in rows of ten, never more than were sent.
    assert reader.text.startswith(replay.text) or replay.text.startswith(reader.text)
    assert replay.text and expected(400).startswith(replay.text)
    assert after[0] == {"type": "cf_agent_chat_recovering", "recovering": True, "id": "r1"}
    continued = "".join(json.loads(f["body"]).get("delta", "") for f in after
                        if f.get("type") == "cf_agent_use_chat_response" and f.get("body") and f.get("continuation"))
    assert replay.text + continued == expected(400)  # nothing lost, nothing twice
    history = survivor.get_json(f"{path}/get-messages", cookie)
    assert [m["role"] for m in history] == ["user", "assistant"]
    # One text part: the continuation went on in the cut one (docs/protocol.md#recovering-frames); its
    # step still adds a step-start part.
    assert [p["text"] for p in history[-1]["parts"] if p["type"] == "text"] == [expected(400)]
