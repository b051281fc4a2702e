"""Resumable streams: the resume handshake (docs/protocol.md#resume-handshake), in-process (InMemory channel layer)."""

import asyncio
import json
import os
import socket

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from agents_app import turns
from agents_app.models import AgentInstance, ChatMessage, StreamRecord, StreamSegment, Turn
from agents_app.protocol import frames as frames_
from agents_app.streaming import buffer, fanout
from tests.support.frames import RESP, chat_request, chunks, is_done, receive_until, user_message

pytestmark = pytest.mark.django_db(transaction=True)

PATH = "/agents/demo-agent/resume"
FULL = "".join(f"w{i} " for i in range(60))


def deltas(frames):
    return "".join(c.get("delta", "") for c in chunks(frames) if c["type"] == "text-delta")


async def opened(ws, path=PATH):
    """A connection, with its connect frames read (returned)."""
    a = await ws(path)
    first = [await a.receive_json_from()]
    while first[-1]["type"] != "cf_agent_mcp_servers":
        first.append(await a.receive_json_from())
    return a, first


async def start_slow_turn(ws, text="/slow 60 15", until_seq=12):
    """Sender ``a`` starts turn r1 and reads up to chunk ``until_seq``."""
    a, _ = await opened(ws)
    await a.send_json_to(chat_request("r1", [user_message("u1", text)]))
    seen = await receive_until(a, lambda f: f.get("seq") == until_seq)
    return a, seen


async def test_connect_during_stream_announces_it_first_and_holds_live_chunks(ws):
    await start_slow_turn(ws)
    b, first = await opened(ws)
    assert first[0] == {"type": "cf_agent_stream_resuming", "id": "r1"}
    assert [f["type"] for f in first[1:]] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    # No live chunk reaches a connection between resuming and its ACK.
    assert await b.receive_nothing(0.1)


async def test_ack_replays_then_continues_live_without_gap_or_duplicate(ws):
    await start_slow_turn(ws)
    b, _ = await opened(ws)
    await asyncio.sleep(0.05)
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r1"})
    frames = await receive_until(b, is_done("r1"))
    replayed = [f for f in frames if f.get("replay")]
    complete = next(i for i, f in enumerate(frames) if f.get("replayComplete"))
    assert frames[complete] == {"body": "", "done": False, "id": "r1", "type": RESP, "replay": True,
                                "replayComplete": True}
    assert all(f.get("replay") for f in frames[:complete])
    assert [f["seq"] for f in replayed[:-1]] == list(range(len(replayed) - 1))
    live = [f for f in frames[complete + 1:] if f["type"] == RESP and "seq" in f]
    assert live[0]["seq"] == replayed[-2]["seq"] + 1
    assert [f["seq"] for f in live] == list(range(live[0]["seq"], live[0]["seq"] + len(live)))
    assert deltas(frames) == FULL
    # Not the sender: the final transcript arrives before done.
    assert frames[-2]["type"] == "cf_agent_chat_messages"


async def test_the_replay_of_a_live_continuation_starts_with_the_stored_transcript(ws):
    """A continuation extends the stored last reply, whose end a client that was away may lack (its
    server stopped mid-reply and a worker continues it): the stored transcript comes first, then
    the replay as for any live stream (docs/protocol.md#replay)."""
    await start_slow_turn(ws)
    await StreamRecord.objects.filter(request_id="r1").aupdate(continuation=True)
    b, first = await opened(ws)
    assert first[0] == {"type": "cf_agent_stream_resuming", "id": "r1"}
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r1"})
    frames = await receive_until(b, is_done("r1"))
    assert frames[0]["type"] == "cf_agent_chat_messages"
    assert [(m["role"], m["id"]) for m in frames[0]["messages"]] == [("user", "u1")]
    complete = next(i for i, f in enumerate(frames) if f.get("replayComplete"))
    assert all(f.get("replay") for f in frames[1:complete])
    assert deltas(frames) == FULL


async def test_resume_request_while_streaming_repeats_resuming_with_probe_id(ws):
    await start_slow_turn(ws)
    b, _first = await opened(ws)
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    assert await b.receive_json_from() == {"type": "cf_agent_stream_resuming", "id": "r1", "probeId": "p1"}


async def test_ack_with_a_wrong_id_is_ignored(ws):
    await start_slow_turn(ws)
    b, _ = await opened(ws)
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "other"})
    assert await b.receive_nothing(0.1)


async def test_duplicate_acks_are_harmless(ws):
    await start_slow_turn(ws)
    b, _ = await opened(ws)
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r1"})
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r1"})
    frames = await receive_until(b, is_done("r1"))
    # The ACK that arrives while the replay is in flight is answered by that replay.
    assert sum(1 for f in frames if f.get("replayComplete")) == 1
    # A client rebuilds from each replayed start; the text after the last one is whole.
    last_start = max(i for i, f in enumerate(frames) if f.get("replay") and '"start"' in f["body"][:20])
    assert deltas(frames[last_start:]) == FULL


async def test_stream_ending_before_the_ack_releases_the_connection_and_a_late_ack_gets_only_done(ws):
    """docs/protocol.md#late-ack: the end reaches the waiting connection live; a late ACK is one empty frame."""
    a, _ = await start_slow_turn(ws, "/slow 20 5", until_seq=3)
    b, first = await opened(ws)
    assert first[0]["type"] == "cf_agent_stream_resuming"
    await receive_until(a, is_done("r1"))
    frames = await receive_until(b, lambda f: f.get("done") is True)
    # Not a chunk (the connection never ACKed), then the final transcript and the terminal frame, live.
    assert [f["type"] for f in frames] == ["cf_agent_chat_messages", RESP]
    assert frames[0]["messages"][-1]["parts"][-1]["text"] == "".join(f"w{i} " for i in range(20))
    assert frames[1] == {"body": "", "done": True, "id": "r1", "type": RESP, "messageIds": ["u1"]}
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r1"})
    assert await b.receive_json_from() == {"body": "", "done": True, "id": "r1", "type": RESP, "replay": True,
                                           "messageIds": ["u1"]}
    assert await b.receive_nothing(0.1)


async def test_an_ack_that_overtakes_the_end_gets_the_transcript_then_done(ws):
    """The writer finished, its end is still on its way to this connection when the ACK arrives."""
    b, _ = await opened(ws)
    instance = await AgentInstance.objects.aget(slug="demo-agent", name="resume")
    stream = await _orphan(instance)
    c, first = await opened(ws)
    assert first[0] == {"type": "cf_agent_stream_resuming", "id": "r-dead"}
    # As _persist_and_finish leaves it: the reply stored, the stream and the turn finished.
    await database_sync_to_async(ChatMessage.objects.create)(
        instance=instance, message_id="m-dead", role="assistant", position=1,
        data={"id": "m-dead", "role": "assistant", "parts": [{"type": "text", "text": "whole", "state": "done"}]})
    await StreamRecord.objects.filter(pk=stream.pk).aupdate(status=StreamRecord.Status.COMPLETED,
                                                            completed_at=timezone.now())
    await Turn.objects.filter(request_id="r-dead").aupdate(status=Turn.Status.COMPLETED)
    await c.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r-dead"})
    transcript, done = await c.receive_json_from(), await c.receive_json_from()
    assert [m["id"] for m in transcript["messages"]] == ["u1", "m-dead"]
    assert done == {"body": "", "done": True, "id": "r-dead", "type": RESP, "replay": True, "messageIds": ["u1"]}
    # The end's live frames, arriving now, are stale for it (another connection still gets them).
    await fanout.publish(instance.pk, frames_.chat_messages([]), request_id="r-dead")
    await fanout.publish(instance.pk, frames_.done(request_id="r-dead"), request_id="r-dead", last_seq=5)
    assert await c.receive_nothing(0.1)
    assert (await b.receive_json_from())["type"] == "cf_agent_chat_messages"


async def test_a_late_ack_for_a_continuation_gets_the_message_ids_its_live_done_gave(ws):
    """The continuation's request ids are found when it runs; its row keeps them for replays."""
    a, _ = await opened(ws)
    await a.send_json_to(chat_request("r1", [user_message("u1", "/tool getBrowserInfo")]))
    await receive_until(a, is_done("r1"))
    await a.send_json_to({"type": "cf_agent_tool_result", "toolCallId": "demo_0_0", "toolName": "getBrowserInfo",
                          "output": {"language": "fr"}, "autoContinue": True})
    live = (await receive_until(a, lambda f: f.get("done") is True and f.get("continuation")))[-1]
    assert live["messageIds"] == ["u1"]
    await a.send_json_to({"type": "cf_agent_stream_resume_ack", "id": live["id"]})
    assert await a.receive_json_from() == {**live, "replay": True}


async def test_late_ack_without_buffer_gets_a_clean_close(ws):
    a, _ = await opened(ws)
    await a.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "gone"})
    assert await a.receive_json_from() == {"body": "", "done": True, "id": "gone", "type": RESP, "replay": True}


async def test_after_completion_connect_is_quiet_and_probe_is_idle(ws):
    a, _ = await start_slow_turn(ws, "/slow 5 1", until_seq=3)
    await receive_until(a, is_done("r1"))
    b, first = await opened(ws)
    assert [f["type"] for f in first] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p9"})
    assert await b.receive_json_from() == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p9"}


async def test_failed_turn_is_delivered_late_to_each_client_until_superseded(ws, user):
    from agents_app.demo.agents import DemoAgent

    agent = await DemoAgent.aget("resume", owner=user)
    result = await agent.save_messages(["/fail"])  # nobody is connected
    assert result.status == "error"
    for _ in range(2):  # every client that comes later learns it
        b, _ = await opened(ws)
        await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
        assert await b.receive_json_from() == {"type": "cf_agent_stream_resuming", "id": result.request_id,
                                               "probeId": "p1"}
        await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": result.request_id})
        frames = await receive_until(b, lambda f: f.get("done") is True)
        assert all(f.get("replay") for f in frames[:-1])
        assert deltas(frames[:-1]) == "This reply will fail "
        assert frames[-1] == {"body": "The demo model failed on purpose (/fail).", "done": True,
                              "id": result.request_id, "type": RESP, "error": True}
    await agent.save_messages(["fine now"])
    b, _ = await opened(ws)
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p2"})
    assert (await b.receive_json_from())["type"] == "cf_agent_stream_resume_none"
    # The superseded failure's chunks are not replayed on a late ACK; its outcome is told.
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": result.request_id})
    done = await b.receive_json_from()
    assert done == {"body": "", "done": True, "id": result.request_id, "type": RESP, "replay": True,
                    "outcome": "error", "messageIds": done["messageIds"]}


async def _orphan(instance, text="partial reply"):
    """A stream whose turn ran in a process that no longer exists (as after kill -9)."""
    def make():
        turn = Turn.objects.create(instance=instance, request_id="r-dead", status=Turn.Status.RUNNING,
                                   started_at=timezone.now(), message_ids=["u1"],
                                   worker=f"{socket.gethostname()}:{2**22 + os.getpid()} specific.x!dead")
        ChatMessage.objects.create(instance=instance, message_id="u1", role="user", position=0,
                                   data={"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]})
        stream = buffer.start(turn, "m-dead")
        words = text.split(" ")
        bodies = [json.dumps({"type": "start", "messageId": "m-dead"}), json.dumps({"type": "start-step"}),
                  json.dumps({"type": "text-start", "id": "t"})]
        bodies += [json.dumps({"type": "text-delta", "id": "t", "delta": w + " "}) for w in words]
        StreamSegment.objects.create(stream=stream, first_index=0, bodies=json.dumps(bodies))
        return stream

    return await database_sync_to_async(make)()


async def test_orphaned_stream_is_replayed_closed_and_recovered_once(ws):
    """docs/protocol.md#orphaned-streams: the cut request's replay ends aborted, then a recovery continuation
    (new id, continuation:true, no second text-start) finishes the same assistant message."""
    b, _first = await opened(ws)
    instance = await AgentInstance.objects.aget(slug="demo-agent", name="resume")
    # The demo model answers "hi" with ECHO_PREFIX + "hi"; the crash cut it after two words.
    await _orphan(instance, "(demo model,")
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    assert (await b.receive_json_from())["id"] == "r-dead"
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r-dead"})
    frames = await receive_until(b, lambda f: f.get("done") is True)
    assert frames[-1] == {"body": "", "done": True, "id": "r-dead", "type": RESP, "replay": True,
                          "outcome": "aborted"}
    assert deltas(frames) == "(demo model, "
    after = await receive_until(b, lambda f: f.get("type") == "cf_agent_chat_recovering" and not f["recovering"])
    assert after[0] == {"type": "cf_agent_chat_recovering", "recovering": True, "id": "r-dead"}
    assert after[-1] == {"type": "cf_agent_chat_recovering", "recovering": False, "id": "r-dead"}
    continued = [f for f in after if f.get("type") == RESP]
    attempt = await Turn.objects.aget(kind=Turn.Kind.RECOVERY)
    assert {f["id"] for f in continued} == {attempt.request_id}
    assert all(f.get("continuation") is True for f in continued)
    bodies = [json.loads(f["body"]) for f in continued if f["body"]]
    assert bodies[0] == {"type": "start"}
    assert "text-start" not in [c["type"] for c in bodies]
    assert "".join(c.get("delta", "") for c in bodies) == "offline) You said: hi"
    assert (await Turn.objects.aget(request_id="r-dead")).status == Turn.Status.ABORTED
    assert (attempt.status, attempt.continuation) == (Turn.Status.COMPLETED, True)
    assert (await StreamRecord.objects.aget(request_id="r-dead")).status == StreamRecord.Status.COMPLETED
    [reply] = [m.data async for m in ChatMessage.objects.filter(role="assistant")]
    assert reply["id"] == "m-dead"
    assert [p["text"] for p in reply["parts"] if p["type"] == "text"] == ["(demo model, offline) You said: hi"]
    # A second ACK after the recovery changes nothing: still one assistant message.
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r-dead"})
    await receive_until(b, lambda f: f.get("done") is True)
    assert await ChatMessage.objects.filter(role="assistant").acount() == 1


async def test_a_turn_queued_behind_a_dead_one_runs_after_recovery(ws):
    a, _ = await opened(ws)
    instance = await AgentInstance.objects.aget(slug="demo-agent", name="resume")
    await _orphan(instance)
    # Submitting finds the instance locked by a dead process on this host, frees it, and runs.
    await a.send_json_to(chat_request("r2", [user_message("u1", "hi"), user_message("u2", "next")]))
    frames = await receive_until(a, is_done("r2"))
    assert deltas(frames).endswith("next")
    assert (await Turn.objects.aget(request_id="r-dead")).status == Turn.Status.ABORTED


async def test_pending_turn_parks_the_client_until_its_stream_starts(ws, user):
    instance = await database_sync_to_async(lambda: AgentInstance.objects.get_or_create(
        slug="demo-agent", name="resume", defaults={"owner": user})[0])()
    await database_sync_to_async(ChatMessage.objects.create)(
        instance=instance, message_id="u1", role="user", position=0, data=user_message("u1", "/slow 5 5"))
    await Turn.objects.acreate(instance=instance, request_id="r-queued", message_ids=["u1"])
    b, first = await opened(ws)
    assert first[0] == {"type": "cf_agent_stream_pending", "id": "r-queued"}
    await b.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    assert await b.receive_json_from() == {"type": "cf_agent_stream_pending", "id": "r-queued", "probeId": "p1"}
    turns.start_drain(instance.pk)
    assert await b.receive_json_from() == {"type": "cf_agent_stream_resuming", "id": "r-queued"}
    await b.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r-queued"})
    frames = await receive_until(b, is_done("r-queued"))
    assert deltas(frames) == "w0 w1 w2 w3 w4 "


async def test_parked_client_is_released_when_no_stream_comes(ws, user):
    instance = await database_sync_to_async(lambda: AgentInstance.objects.get_or_create(
        slug="demo-agent", name="resume", defaults={"owner": user})[0])()
    await Turn.objects.acreate(instance=instance, request_id="r-q", message_ids=[], generation=0)
    b, first = await opened(ws)
    assert first[0]["type"] == "cf_agent_stream_pending"
    await AgentInstance.objects.filter(pk=instance.pk).aupdate(generation=1)  # a clear made it stale
    await turns.drain(instance.pk)
    assert await b.receive_json_from() == {"type": "cf_agent_stream_resume_none", "reason": "idle"}


async def test_clear_deletes_stream_buffers(ws):
    a, _ = await start_slow_turn(ws, "/slow 12 1", until_seq=3)
    await receive_until(a, is_done("r1"))
    assert await StreamSegment.objects.acount() > 0
    await a.send_json_to({"type": "cf_agent_chat_clear"})
    await asyncio.sleep(0.1)
    assert await StreamRecord.objects.acount() == 0
    assert await StreamSegment.objects.acount() == 0


async def test_continuation_stream_replay_carries_the_flag(ws, user):
    a, _ = await start_slow_turn(ws, "/slow 3 1", until_seq=3)
    await receive_until(a, is_done("r1"))
    instance = await AgentInstance.objects.aget(slug="demo-agent", name="resume")
    stream = await StreamRecord.objects.aget(request_id="r1")
    await StreamRecord.objects.filter(pk=stream.pk).aupdate(continuation=True)
    await a.send_json_to({"type": "cf_agent_stream_resume_ack", "id": "r1"})
    frames = await receive_until(a, lambda f: f.get("done") is True)
    assert all(f.get("continuation") for f in frames if f["type"] == RESP)
    assert instance.pk
