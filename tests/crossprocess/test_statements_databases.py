"""The engine's written-out statements read and write what the ORM would, on SQLite and PostgreSQL.

``agents_app.statements`` replaces the querysets of the per-turn reads and writes with SQL made
from the models' metadata. A script process (the production settings on a migrated database of
each kind) makes each read both ways, over rows holding every kind of column the engine stores
(JSON, datetimes, booleans, a user or none), makes each write (updates, inserts read back
through the ORM, a row lock) and prints what it found.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.support.live import LiveStack, ScriptProcess, database_url

pytestmark = pytest.mark.crossprocess

SCRIPT = r"""
import json
from datetime import timedelta

import django
django.setup()

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from agents_app import statements, transcript
from agents_app.models import (AgentInstance, ChatMessage, MCPServerConfig, RecoveryIncident, RequestContext,
                               StreamRecord, StreamSegment, Turn)
from agents_app.streaming import buffer, resume
from agents_app.turns import admission, engine, lock

def fields(obj):
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}

report = {}
user = get_user_model().objects.create_user("statements", password="x", email="s@example.com")
instance = AgentInstance.objects.create(slug="demo-agent", name="statements", generation=3, overlap_sequence=5)
later = timezone.now() + timedelta(seconds=30)
done = Turn.objects.create(instance=instance, request_id="done", status=Turn.Status.COMPLETED, generation=3)
first = Turn.objects.create(
    instance=instance, request_id="r1", generation=3, user=user, priority=1, run_after=later,
    body={"model": "x", "nested": {"a": [1, 2.5, None, "é"]}}, client_tools=[{"name": "t"}],
    message_ids=["u1", "u2"], cancel_requested=True, submit_sequence=5,
)
Turn.objects.create(instance=instance, request_id="r2", generation=3)

head, generation, sequence = lock._queued_head(instance.pk)
orm = Turn.objects.select_related("user").get(pk=first.pk)
report["head"] = {
    "same_turn": fields(head) == fields(orm),
    "same_user": fields(head.user) == fields(orm.user),
    "state": [generation, sequence],
    "is_stale": head.is_stale(generation, sequence),
}
anonymous = Turn.objects.create(instance=AgentInstance.objects.create(slug="demo-agent", name="anon"), request_id="a")
head_anonymous = lock._queued_head(anonymous.instance_id)[0]
report["anonymous"] = {"user": head_anonymous.user,
                       "same": fields(head_anonymous) == fields(Turn.objects.get(pk=anonymous.pk))}
report["empty"] = lock._queued_head(AgentInstance.objects.create(slug="demo-agent", name="empty").pk)

read, mcp_before, cancel = engine._instance_and_cancel_flag(first.pk)
MCPServerConfig.objects.create(instance=instance, name="docs", url="http://127.0.0.1:9/mcp")
mcp_after = engine._instance_and_cancel_flag(first.pk)[1]
report["instance"] = {"same": fields(read) == fields(AgentInstance.objects.get(pk=instance.pk)), "cancel": cancel,
                      "mcp_servers": [mcp_before, mcp_after]}
def admission_read(instance_pk, user_pk):
    return admission.read_queue(instance_pk, user_pk, None, None)


# No message stored yet: one row, the queue's columns and NULLs.
queue, queue_empty = admission_read(instance.pk, user.pk), admission_read(anonymous.instance_id, None)
report["queue_and_user"] = [[len(queue), queue[0][0], queue[0][1], bool(queue[0][2]),
                             all(value is None for value in queue[0][4:])],
                            [len(queue_empty), queue_empty[0][0], queue_empty[0][1], bool(queue_empty[0][2])]]
newest = Turn.objects.filter(instance=instance).order_by("-pk").values("pk", "status").first()
report["latest"] = engine._latest_turn(instance.pk) == lock.Look(newest["pk"], newest["status"], True)

messages = [{"id": f"m{i}", "role": "user", "parts": [{"type": "text", "text": f"t{i} ✓"}]} for i in range(5)]
transcript.persist(instance, messages)
read = admission_read(instance.pk, user.pk)
report["queue_and_transcript"] = {
    "rows": len(read), "queue": all(list(row[:2]) == [3, 1] for row in read),
    "transcript": transcript._converted([row[4:] for row in read]) == transcript._converted(transcript._read(instance)),
    # m0 edited: the rows read are what the merge starts from.
    "persisted": transcript.persist(instance, [{**messages[0], "parts": [{"type": "text", "text": "edited"}]},
                                               *messages[1:]], stored=[row[4:] for row in read])
    == transcript.load(instance) != messages,
}
stored_data = list(ChatMessage.objects.filter(instance=instance).values_list("data", flat=True))
report["load"] = transcript.load(instance) == stored_data
# The end of a turn's write reads back the look at the queue that ``_latest_turn`` reads after it.
def ending(name, before=(), after=(), **also):
    of = AgentInstance.objects.create(slug="demo-agent", name=name)
    for n, status in enumerate(before):
        Turn.objects.create(instance=of, request_id=f"before-{n}", status=status)
    ended = Turn.objects.create(instance=of, request_id="ending", status=Turn.Status.RUNNING, worker="w")
    for n, status in enumerate(after):
        Turn.objects.create(instance=of, request_id=f"after-{n}", status=status)
    with transaction.atomic():
        look = lock.finish_and_look(ended, Turn.Status.COMPLETED, "", **also)
    stored = Turn.objects.get(pk=ended.pk)
    newest = Turn.objects.filter(instance=of).order_by("-pk").first()
    return [look == engine._latest_turn(of.pk), look and [look.newest == newest.pk, look.status, look.queued],
            stored.status, ended.status]

report["finish_and_look"] = {
    "alone": ending("alone", message_ids=["u1"], attachments=[{"kind": "file"}]),
    "newer_queued": ending("newer-queued", after=[Turn.Status.COMPLETED, Turn.Status.QUEUED]),
    "newer_skipped": ending("newer-skipped", after=[Turn.Status.SKIPPED]),
    "older_queued": ending("older-queued", before=[Turn.Status.QUEUED, Turn.Status.COMPLETED]),
}
gone = Turn.objects.create(instance=anonymous.instance, request_id="not-running", status=Turn.Status.ABORTED)
report["finish_and_look"]["not_running"] = [lock.finish_and_look(gone, Turn.Status.COMPLETED),
                                            Turn.objects.get(pk=gone.pk).status, gone.status]
written = Turn.objects.get(request_id="ending", instance__name="alone")
report["finish_and_look"]["written"] = [written.message_ids, written.attachments, written.finished_at is not None]
report["anonymous_messages"] = ChatMessage.objects.filter(instance_id=anonymous.instance_id).count()
report["next_position"] = transcript.next_position(instance)
reply = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "é", "state": "done"}]}
with transaction.atomic():
    generation = AgentInstance.objects.touch(instance.pk, terminal_request_id="r0", terminal_error="boom")
    touched = AgentInstance.objects.touch_and_read(instance.pk)
    transcript.save_message(instance, reply, touched=True)
report["touch"] = {"same": fields(touched) == fields(AgentInstance.objects.get(pk=instance.pk)),
                   "terminal": [touched.terminal_request_id, touched.terminal_error],
                   "generation": [generation, touched.generation]}
row = ChatMessage.objects.get(instance=instance, message_id="a1")
transcript.save_message(instance, {**reply, "parts": []})
again = ChatMessage.objects.get(instance=instance, message_id="a1")
report["save_message"] = {
    "appended": [row.position, row.role, row.data == reply],
    "replaced": [again.pk == row.pk, again.position, again.data["parts"], again.created_at == row.created_at,
                 again.updated_at >= row.updated_at],
    "load": transcript.load(instance)[-1] == {**reply, "parts": []},
}

now = timezone.now()
with transaction.atomic():
    claimed = statements.update(Turn, {"pk": first.pk, "status": Turn.Status.QUEUED},
                                status=Turn.Status.RUNNING, started_at=now, worker="w")
    again = statements.update(Turn, {"pk": first.pk, "status": Turn.Status.QUEUED}, status=Turn.Status.RUNNING)
lock.finish(first, Turn.Status.COMPLETED, "", message_ids=["u9"], attachments=[{"kind": "file", "n": 1}])
stored = Turn.objects.get(pk=first.pk)
report["update"] = {
    "counts": [claimed, again],
    "started_at": stored.started_at == now,
    "values": [stored.status, stored.worker, stored.message_ids, stored.attachments, stored.finished_at is not None],
}
record = StreamRecord.objects.create(instance=instance, turn=first, request_id="r1")
report["stream_finish"] = [statements.update(StreamRecord, {"pk": record.pk, "status": StreamRecord.Status.STREAMING},
                                             status=StreamRecord.Status.COMPLETED),
                           StreamRecord.objects.get(pk=record.pk).status]
new = Turn(instance=instance, request_id="inserted", body={"x": [1, "é"]}, message_ids=["a"], run_after=later)
statements.insert(new)
report["insert"] = {"same": fields(new) == fields(Turn.objects.get(pk=new.pk)), "adding": new._state.adding}
segments = [StreamSegment(stream=record, first_index=i * 10, bodies=json.dumps([f"b{i}"])) for i in range(7)]
statements.insert_many(segments, batch_size=3)
report["insert_many"] = list(StreamSegment.objects.filter(stream=record).values_list("first_index", "bodies"))
replayed, chunks = buffer.read_request(instance, "r1")
empty_record = StreamRecord.objects.create(instance=instance, request_id="r-empty", continuation=True)
empty, no_chunks = buffer.read_request(instance, "r-empty")
report["read_request"] = {
    "same": fields(replayed) == fields(StreamRecord.objects.get(pk=record.pk)),
    "chunks": chunks == [(i * 10, f"b{i}") for i in range(7)],
    "empty": [fields(empty) == fields(empty_record), no_chunks],
    "none": list(buffer.read_request(instance, "nothing")),
}
before = StreamRecord.objects.get(pk=empty_record.pk).last_chunk_at
buffer.write_rows(empty_record.pk, [(0, ["x0", "x1"]), (2, ["x2 é"])])
gone = StreamRecord.objects.create(instance=instance, request_id="r-gone")
gone_pk = gone.pk
gone.delete()
buffer.write_rows(gone_pk, [(0, ["lost"])])
with transaction.atomic():
    buffer.write_rows(empty_record.pk, [(3, ["x3"])])
report["write_rows"] = {
    "rows": list(StreamSegment.objects.filter(stream=empty_record).values_list("first_index", "bodies")),
    "last_chunk_at_moves": StreamRecord.objects.get(pk=empty_record.pk).last_chunk_at > before,
    "gone": StreamSegment.objects.filter(stream_id=gone_pk).count(),
    "read": buffer.read_request(instance, "r-empty")[1],
}
transcript.store_request_context(instance, {"model": "é", "n": [1, None]}, None)
first_context = RequestContext.objects.get(instance=instance)
transcript.store_request_context(instance, None, [{"name": "t", "parameters": {"type": "object"}}])
second_context = RequestContext.objects.get(instance=instance)
report["upsert"] = {
    "first": [first_context.body, first_context.client_tools],
    "second": [second_context.body, second_context.client_tools],
    "rows": RequestContext.objects.filter(instance=instance).count(),
    "updated_at_moves": second_context.updated_at >= first_context.updated_at,
    "read_back": transcript.request_context(instance) == (None, [{"name": "t", "parameters": {"type": "object"}}]),
}
tools = [{"name": "t", "parameters": {"type": "object"}}]


def context_kept(body, client_tools):
    return bool(admission.read_queue(instance.pk, user.pk, body, client_tools)[0][3])


# The admission's read says whether the stored context is the request's: the same values, NULLs included.
report["context_kept"] = [context_kept(None, tools), context_kept(None, None), context_kept({"model": "é"}, tools),
                          context_kept(None, [{**tools[0], "name": "u"}]),
                          bool(admission.read_queue(anonymous.instance_id, None, None, None)[0][3])]
transcript.store_request_context(instance, None, None)
report["context_kept"] += [context_kept(None, None), context_kept(None, tools)]
body = {"model": "é", "n": [1, None], "nested": {"a": True}}
transcript.store_request_context(instance, body, tools)
report["context_kept"] += [context_kept(dict(body), list(tools)), context_kept({**body, "n": [1]}, tools),
                           context_kept(body, None)]
with transaction.atomic():
    statements.lock_row(AgentInstance, instance.pk, "overlap_sequence")
report["lock_row"] = AgentInstance.objects.queue_state(instance.pk)
try:
    statements.update(Turn, {"pk": first.pk}, priority=django.db.models.F("priority") + 1)
except TypeError as exc:
    report["expression"] = "plain values" in str(exc)

def incident(of, root, status):
    return RecoveryIncident.objects.create(instance=of, incident_id=f"{root}:u", root_request_id=root, status=status,
                                           last_progress_at=timezone.now())

def state(of):
    read = resume.load_state(of)
    return {name: getattr(read, name) for name in ("active_request_id", "active_continuation", "active_orphaned",
            "control_channel", "terminal_request_id", "pending_request_id", "recovering_request_id")} | {
            "turn": read.turn_pk, "pending": read.pending_turn_pk}

live = AgentInstance.objects.create(slug="demo-agent", name="resume-live", terminal_request_id="old")
StreamRecord.objects.create(instance=live, request_id="before", status=StreamRecord.Status.COMPLETED)
running = Turn.objects.create(instance=live, request_id="ra", status=Turn.Status.RUNNING, started_at=timezone.now(),
                              heartbeat_at=timezone.now(), worker="elsewhere:1 control.abc")
StreamRecord.objects.create(instance=live, turn=running, request_id="ra", continuation=True)
StreamRecord.objects.create(instance=live, request_id="after", status=StreamRecord.Status.ERROR)
queued = AgentInstance.objects.create(slug="demo-agent", name="resume-queued", terminal_request_id="rt")
Turn.objects.create(instance=queued, request_id="rq1")
second = Turn.objects.create(instance=queued, request_id="rq2")
Turn.objects.create(instance=queued, request_id="rq3", status=Turn.Status.COMPLETED)
incident(queued, "rq0", RecoveryIncident.Status.ATTEMPTING)
recovering = AgentInstance.objects.create(slug="demo-agent", name="resume-recovering")
incident(recovering, "old", RecoveryIncident.Status.DETECTED)
incident(recovering, "newer", RecoveryIncident.Status.SCHEDULED)
incident(recovering, "done", RecoveryIncident.Status.COMPLETED)
orphan = AgentInstance.objects.create(slug="demo-agent", name="resume-orphan")
StreamRecord.objects.create(instance=orphan, request_id="ro")
stale = AgentInstance.objects.create(slug="demo-agent", name="resume-stale")
long_ago = timezone.now() - timedelta(minutes=5)
cut = Turn.objects.create(instance=stale, request_id="rs", status=Turn.Status.RUNNING, worker="elsewhere:2 control.s",
                          started_at=long_ago, heartbeat_at=long_ago)
StreamRecord.objects.create(instance=stale, turn=cut, request_id="rs")
report["resume_state"] = {
    "live": state(live), "queued": state(queued), "recovering": state(recovering), "orphan": state(orphan),
    "stale": state(stale), "empty": state(AgentInstance.objects.create(slug="demo-agent", name="resume-empty")),
    "ids": {"running": running.pk, "second": second.pk, "cut": cut.pk},
    "terminal_read": resume.load_state(live) and live.terminal_request_id,
}
# What a socket that adopts a new conversation reads: the transcript and the turns whose end it holds.
Turn.objects.create(instance=queued, request_id="rq4", status=Turn.Status.ERROR)
Turn.objects.create(instance=queued, request_id='rq5 "é"', status=Turn.Status.ABORTED)
transcript.persist(queued, messages[:2])

def ended_by_orm(of):
    ended = Turn.objects.filter(instance=of).exclude(status__in=[*Turn.ACTIVE_STATUSES, Turn.Status.ERROR])
    return [transcript.load(of), sorted(ended.values_list("request_id", flat=True))]

def ended_read(of):
    messages_read, ended = resume._transcript_and_ended(of)
    return [messages_read, sorted(ended)]

report["transcript_and_ended"] = {
    "same": [ended_read(of) == ended_by_orm(of) for of in (instance, queued, recovering)],
    "queued": ended_read(queued)[1], "messages": len(ended_read(queued)[0]),
}
# statements.together: on PostgreSQL its writes wait for the next statement, on SQLite they run at
# once; what every query sees, and what is stored, is the same.
box = AgentInstance.objects.create(slug="demo-agent", name="together")

def note(message_id, position):
    return ChatMessage(instance=box, message_id=message_id, role="user", position=position, data={"n": position})

with transaction.atomic():
    with statements.together(Turn):
        statements.insert_many([note("t0", 0)])
        transcript.store_request_context(box, {"k": "é"}, None)
        orm_saw = [ChatMessage.objects.filter(instance=box).count(),
                   RequestContext.objects.filter(instance=box).count()]
        statements.insert_many([note("t1", 1)])
        statement_saw = [m["n"] for m in transcript.load(box)]
        statements.insert_many([note("t2", 2)])
        joined = Turn(instance=box, request_id="together")
        statements.insert(joined)
        statements.insert_many([note("t3", 3)])
with transaction.atomic():
    try:
        with statements.together(Turn):
            statements.insert_many([note("t4", 4)])
            raise RuntimeError("not a database error")
    except RuntimeError:
        pass
try:
    with transaction.atomic():
        with statements.together(Turn):
            statements.insert_many([note("t5", 5)])
            statements.insert(Turn(instance=box, request_id="together"))  # unique_turn_request
except django.db.IntegrityError:
    refused = True
try:
    with statements.together(Turn):
        pass
except RuntimeError as exc:
    outside = str(exc)
sent = []

def record(run, sql, *args):
    sent.append(sql)
    return run(sql, *args)

with transaction.atomic(), django.db.connection.execute_wrapper(record):
    with statements.together(Turn):
        statements.insert_many([note("t6", 6)])
        transcript.store_request_context(box, None, None)
        statements.insert(Turn(instance=box, request_id="sent"))
report["together"] = {
    "orm_saw": orm_saw, "statement_saw": statement_saw,
    "turn": fields(joined) == fields(Turn.objects.get(pk=joined.pk)),
    "messages": list(ChatMessage.objects.filter(instance=box).order_by("position")
                     .values_list("message_id", flat=True)),
    "context": transcript.request_context(box), "refused": refused, "outside": outside,
    "statements": [sql.split()[0] for sql in sent if "SAVEPOINT" not in sql],
}
# Two replies in one block: the second's position counts the first (a write of a table a waiting
# one writes sends it first); a savepoint rolled back drops what waited since it; the stream's last
# write (a WITH of its own) takes the waiting writes in front.
closing = StreamRecord.objects.create(instance=box, request_id="closing")
sent.clear()
with transaction.atomic(), django.db.connection.execute_wrapper(record):
    with statements.together(Turn):
        transcript.save_message(box, {"id": "r1", "role": "assistant", "parts": []}, touched=True)
        transcript.save_message(box, {"id": "r2", "role": "assistant", "parts": []}, touched=True)
        try:
            with transaction.atomic():
                statements.insert_many([note("rolled-back", 20)])
                raise RuntimeError("rolled back to the savepoint")
        except RuntimeError:
            pass
        statements.insert_many([note("t7", 7)])
        buffer.finish(closing.pk, [(0, ["c0", "c1"])], error=False)
closed = StreamRecord.objects.get(pk=closing.pk)
report["together_more"] = {
    "positions": list(ChatMessage.objects.filter(instance=box, message_id__in=["r1", "r2"]).order_by("message_id")
                      .values_list("position", flat=True)),
    "rolled_back": ChatMessage.objects.filter(instance=box, message_id="rolled-back").count(),
    "t7": ChatMessage.objects.filter(instance=box, message_id="t7").count(),
    "closed": [closed.status, buffer.read(closed)],
    "statements": [sql.split()[0] for sql in sent],
}
# statements.insert_linked: a turn and its stream buffer, a waiting write in front: one statement
# on PostgreSQL, and what is stored is what the two inserts store.
sent.clear()
with transaction.atomic(), django.db.connection.execute_wrapper(record):
    with statements.together(Turn):
        statements.insert_many([note("t8", 8)])
        linked_turn = Turn(instance=box, request_id="linked", assistant_message_id="m-linked")
        linked_stream = buffer.new_record(linked_turn, "m-linked")
        statements.insert_linked(linked_turn, linked_stream, "turn")
stored_stream = StreamRecord.objects.get(pk=linked_stream.pk)
report["linked"] = {
    "turn": fields(linked_turn) == fields(Turn.objects.get(pk=linked_turn.pk)),
    "stream": fields(linked_stream) == fields(stored_stream),
    "link": [stored_stream.turn_id == linked_turn.pk, linked_stream.turn_id == linked_turn.pk],
    "t8": ChatMessage.objects.filter(instance=box, message_id="t8").count(),
    "statements": [sql.split()[0] for sql in sent],
}
try:
    with transaction.atomic():
        statements.insert_linked(Turn(instance=box, request_id="linked"), StreamRecord(instance=box, request_id="x"),
                                 "turn")
except django.db.IntegrityError:  # unique_turn_request: neither row
    report["linked"]["refused"] = [Turn.objects.filter(instance=box, request_id="linked").count(),
                                   StreamRecord.objects.filter(request_id="x").count()]
from agents_app import registry
owned = AgentInstance.objects.create(slug="demo-agent", name="addressed", owner=user)
unowned = AgentInstance.objects.create(slug="demo-agent", name="addressed")
found = registry._stored("demo-agent", "addressed", user)
raced, created = registry._materialized(AgentInstance(slug="demo-agent", name="addressed", owner=user))
report["address"] = [found.pk == owned.pk, found.owner.username, registry._stored("demo-agent", "addressed", None).pk
                     == unowned.pk, registry._stored("demo-agent", "elsewhere", user), raced.pk == owned.pk, created]
# A first message's row in its admission's transaction: a lost race writes nothing and leaves the
# transaction usable (on PostgreSQL, a failed insert would have aborted it).
with transaction.atomic():
    again, made_again = registry.make_in_transaction(AgentInstance(slug="demo-agent", name="addressed", owner=user))
    fresh, made_fresh = registry.make_in_transaction(AgentInstance(slug="demo-agent", name="fresh", owner=user))
    usable = AgentInstance.objects.filter(name="fresh", owner=user).count()
report["in_transaction"] = [again.pk == owned.pk, len(made_again), [row.pk for row in made_fresh] == [fresh.pk], usable]
from django.contrib.auth.backends import ModelBackend
from django.contrib.sessions.backends.db import SessionStore as DjangoSessionStore
from agents_app.web.sessions import SessionStore, UserBackend
session = DjangoSessionStore()
session["data"] = [1, "é", {"x": None}]
session.save()
report["sessions"] = [SessionStore(session.session_key).load() == DjangoSessionStore(session.session_key).load(),
                      SessionStore("no-such-session-key").load(),
                      fields(UserBackend().get_user(user.pk)) == fields(ModelBackend().get_user(user.pk)),
                      UserBackend().get_user(user.pk + 1000)]

print(json.dumps(report), flush=True)
"""


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def test_written_out_statements_match_the_orm(database: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = database_url(request, database, tmp_path, "statements")
    stack = LiveStack(tmp_path, "redis://127.0.0.1:9/0", url, extra_env={"CHANNEL_LAYER": "memory"})
    report: dict[str, Any] = ScriptProcess(SCRIPT, stack.env, tmp_path / "script.log").receive(timeout=120)
    assert report["head"] == {"same_turn": True, "same_user": True, "state": [3, 5], "is_stale": False}
    assert report["anonymous"] == {"user": None, "same": True}
    assert report["empty"] is None
    assert report["instance"] == {"same": True, "cancel": True, "mcp_servers": [False, True]}
    assert report["queue_and_user"] == [[1, 3, 1, True, True], [1, 0, 0, False]]
    assert report["queue_and_transcript"] == {"rows": 5, "queue": True, "transcript": True, "persisted": True}
    assert report["together"] == {
        "orm_saw": [1, 1], "statement_saw": [0, 1], "turn": True, "messages": ["t0", "t1", "t2", "t3", "t4", "t6"],
        "context": [None, None], "refused": True,
        "outside": "statements.together runs inside a transaction (transaction.atomic)",
        # Two writes and an insert: one statement on PostgreSQL, three on SQLite.
        "statements": {"sqlite": ["INSERT", "INSERT", "INSERT"], "postgres": ["WITH"]}[database],
    }
    together_more = report["together_more"]
    assert together_more.pop("statements") == {
        "sqlite": ["INSERT", "INSERT", "SAVEPOINT", "INSERT", "ROLLBACK", "RELEASE", "INSERT", "UPDATE", "INSERT"],
        # r1 waits; r2 sends it first; the savepoint sends r2 (recorded after it: the recording
        # wrapper is the outer one); the rolled-back row is dropped; t7 goes with the stream's
        # last write.
        "postgres": ["INSERT", "SAVEPOINT", "INSERT", "ROLLBACK", "RELEASE", "WITH"],
    }[database]
    assert together_more == {"positions": [7, 8], "rolled_back": 0, "t7": 1,
                             "closed": ["completed", [[0, "c0"], [1, "c1"]]]}
    assert report["linked"] == {
        "turn": True, "stream": True, "link": [True, True], "t8": 1, "refused": [1, 0],
        "statements": {"sqlite": ["INSERT", "INSERT", "INSERT"], "postgres": ["WITH"]}[database],
    }
    assert report["latest"] is True
    assert report["in_transaction"] == [True, 0, True, 1]
    assert report["sessions"] == [True, {}, True, None]
    assert report["load"] is True
    # The newest turn is the one ended or a later one (queued, skipped); a queued one before or after it.
    assert report["finish_and_look"] == {
        "alone": [True, [True, "completed", False], "completed", "completed"],
        "newer_queued": [True, [True, "queued", True], "completed", "completed"],
        "newer_skipped": [True, [True, "skipped", False], "completed", "completed"],
        "older_queued": [True, [True, "completed", True], "completed", "completed"],
        "not_running": [None, "aborted", "aborted"],
        "written": [["u1"], [{"kind": "file"}], True],
    }
    assert report["anonymous_messages"] == 0
    assert report["next_position"] == 5
    assert report["touch"]["same"] is True and report["touch"]["terminal"] == ["r0", "boom"]
    generation, stored_generation = report["touch"]["generation"]
    assert isinstance(generation, int) and generation == stored_generation
    assert report["save_message"] == {"appended": [5, "assistant", True], "replaced": [True, 5, [], True, True],
                                      "load": True}
    assert report["update"] == {
        "counts": [1, 0], "started_at": True,
        "values": ["completed", "w", ["u9"], [{"kind": "file", "n": 1}], True],
    }
    assert report["stream_finish"] == [1, "completed"]
    # registry.locate's address read; a first message that lost the race for its address.
    assert report["address"] == [True, "statements", True, None, True, []]
    assert report["expression"] is True
    assert report["insert"] == {"same": True, "adding": False}
    assert report["insert_many"] == [[i * 10, f'["b{i}"]'] for i in range(7)]
    assert report["read_request"] == {"same": True, "chunks": True, "empty": [True, []], "none": [None, []]}
    assert report["write_rows"] == {
        "rows": [[0, '["x0", "x1"]'], [2, '["x2 \\u00e9"]'], [3, '["x3"]']], "last_chunk_at_moves": True, "gone": 0,
        "read": [[0, "x0"], [1, "x1"], [2, "x2 é"], [3, "x3"]],
    }
    assert report["lock_row"] == [3, 5]
    ids = report["resume_state"].pop("ids")
    nothing = {"active_request_id": None, "active_continuation": False, "active_orphaned": False,
               "control_channel": None, "terminal_request_id": None, "pending_request_id": None,
               "recovering_request_id": None, "turn": None, "pending": 0}
    assert report["resume_state"] == {
        "live": {**nothing, "active_request_id": "ra", "active_continuation": True, "control_channel": "control.abc",
                 "terminal_request_id": "old", "pending_request_id": "ra", "turn": ids["running"],
                 "pending": ids["running"]},
        # An open incident is reported only when nothing is pending.
        "queued": {**nothing, "terminal_request_id": "rt", "pending_request_id": "rq2", "pending": ids["second"]},
        "recovering": {**nothing, "recovering_request_id": "newer"},
        "orphan": {**nothing, "active_request_id": "ro", "active_orphaned": True},
        "stale": {**nothing, "active_request_id": "rs", "active_orphaned": True, "control_channel": "control.s",
                  "pending_request_id": "rs", "turn": ids["cut"], "pending": ids["cut"]},
        "empty": nothing,
        "terminal_read": "old",
    }
    assert report["transcript_and_ended"] == {"same": [True, True, True], "queued": ["rq3", 'rq5 "é"'], "messages": 2}
    assert report["context_kept"] == [True, False, False, False, False, True, False, True, False, False]
    assert report["upsert"] == {
        "first": [{"model": "é", "n": [1, None]}, None],
        "second": [None, [{"name": "t", "parameters": {"type": "object"}}]],
        "rows": 1, "updated_at_moves": True, "read_back": True,
    }
