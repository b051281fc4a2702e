"""Per-user namespaces of instance names, the staff address (``?owner=``), and the migration to them."""

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.db.models.signals import post_save
from django.test import AsyncClient, override_settings
from django.test.utils import CaptureQueriesContext

from agents_app import registry, tasks
from agents_app.demo.agents import DemoAgent
from agents_app.models import AgentInstance, Turn
from agents_app.streaming.resume import ResumeDriver
from tests.agents import SharedRoomAgent
from tests.conftest import connect
from tests.support.frames import chat_request, is_done, open_agent, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)


async def make(make_user: Any, name: str, **extra: Any) -> Any:
    return await database_sync_to_async(make_user)(name, **extra)


async def say(a: Any, request_id: str, text: str) -> str:
    await a.send_json_to(chat_request(request_id, [user_message(f"u-{request_id}", text)]))
    return text_of(await receive_until(a, is_done(request_id)))


async def history(user: Any, path: str) -> Any:
    client = AsyncClient()
    await client.aforce_login(user)
    response = await client.get(path)
    return response.status_code, response.json()


async def first_frame(path: str, user: Any) -> tuple[dict[str, Any], int | None]:
    """The first frame and the close code (None while open) of a connection to ``path``."""
    communicator, _, _ = await connect(path, user)
    frame = await communicator.receive_json_from()
    if frame["type"] == "cf_agent_error":
        return frame, (await communicator.receive_output())["code"]
    await communicator.disconnect()
    return frame, None


async def test_two_users_each_have_their_own_default(ws, user, make_user):
    bob = await make(make_user, "bob")
    alices = await open_agent(ws, "/agents/demo-agent/default")
    bobs = await ws("/agents/demo-agent/default", as_user=bob)
    assert [(await bobs.receive_json_from())["type"] for _ in range(2)] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    assert await say(alices, "r1", "from alice") == "(demo model, offline) You said: from alice"
    assert await say(bobs, "r1", "from bob") == "(demo model, offline) You said: from bob"
    owners = [owner async for owner in AgentInstance.objects.filter(name="default").values_list(
        "owner__username", flat=True).order_by("owner__username")]
    assert owners == ["alice", "bob"]
    for who, text in ((user, "from alice"), (bob, "from bob")):
        status, messages = await history(who, "/agents/demo-agent/default/get-messages")
        assert status == 200
        assert [m["parts"][0]["text"] for m in messages if m["role"] == "user"] == [text]


async def test_staff_open_another_users_conversation_with_the_owner_parameter(ws, make_user):
    alices = await open_agent(ws, "/agents/demo-agent/notes")
    await say(alices, "r1", "a note")
    staff = await make(make_user, "boss", is_staff=True)
    frame, code = await first_frame("/agents/demo-agent/notes?owner=alice", staff)
    assert (frame["type"], frame["name"], code) == ("cf_agent_identity", "notes", None)
    status, messages = await history(staff, "/agents/demo-agent/notes/get-messages?owner=alice")
    assert (status, messages[0]["parts"][0]["text"]) == (200, "a note")
    # Their own "notes" is another conversation, which nobody wrote to: empty, and reading it makes nothing.
    assert await history(staff, "/agents/demo-agent/notes/get-messages") == (200, [])
    assert not await AgentInstance.objects.filter(name="notes", owner__username="boss").aexists()


async def test_a_staff_visit_makes_nothing_in_another_namespace(user, make_user):
    staff = await make(make_user, "boss", is_staff=True)
    frame, code = await first_frame("/agents/demo-agent/never?owner=alice", staff)
    assert (frame["code"], frame["error"], code) == (
        "UnknownInstance", "There is no conversation demo-agent/never of alice", 4404)
    frame, code = await first_frame("/agents/demo-agent/never?owner=nobody", staff)
    assert (frame["error"], code) == ("There is no user 'nobody'", 4404)
    assert await AgentInstance.objects.acount() == 0


async def test_naming_ones_own_namespace_is_the_same_as_naming_none(ws, user):
    await say(await open_agent(ws, "/agents/demo-agent/mine"), "r1", "hello")
    _, messages = await history(user, "/agents/demo-agent/mine/get-messages?owner=alice")
    assert messages[0]["parts"][0]["text"] == "hello"


async def test_the_global_namespace_is_staff_only(user, make_user):
    """``aget(name)`` without an owner makes a conversation of nobody's: staff reach it with ``owner=``."""
    agent = await DemoAgent.aget("nightly")
    assert agent.instance.owner_id is None
    await agent.save_messages(["scheduled"])
    staff = await make(make_user, "boss", is_staff=True)
    status, messages = await history(staff, "/agents/demo-agent/nightly/get-messages?owner=")
    assert (status, [m["role"] for m in messages]) == (200, ["user", "assistant"])
    frame, code = await first_frame("/agents/demo-agent/nightly?owner=", user)
    assert (frame["code"], code) == ("PermissionDenied", 4403)
    # Alice's own "nightly" is hers, not the global one: empty, and not made by reading it.
    assert await history(user, "/agents/demo-agent/nightly/get-messages") == (200, [])
    assert not await AgentInstance.objects.filter(name="nightly", owner=user).aexists()


async def test_a_shared_class_has_one_namespace_and_ignores_the_owner_parameter(ws, user, make_user):
    bob = await make(make_user, "bob")
    await say(await open_agent(ws, "/agents/shared-room-agent/lobby"), "r1", "hi all")
    for query in ("", "?owner=x"):
        status, messages = await history(bob, f"/agents/shared-room-agent/lobby/get-messages{query}")
        assert (status, len(messages)) == (200, 2)
    instance = await AgentInstance.objects.aget(slug="shared-room-agent")
    assert instance.owner_id is None
    assert (await SharedRoomAgent.aget("lobby")).instance.pk == instance.pk


async def test_aget_reads_the_owners_namespace(user, make_user):
    bob = await make(make_user, "bob")
    alices, bobs, nobodys = [(await DemoAgent.aget("inbox", owner=o)).instance for o in (user, bob, None)]
    assert len({alices.pk, bobs.pk, nobodys.pk}) == 3
    assert (await DemoAgent.aget("inbox", owner=user)).instance.pk == alices.pk
    with pytest.raises(ValueError, match="SharedRoomAgent is shared"):
        await SharedRoomAgent.aget("lobby", owner=user)


def test_a_name_is_unique_within_each_namespace(make_user: Any) -> None:
    alice = make_user("alice")
    for owner in (alice, None):
        AgentInstance.objects.create(slug="demo-agent", name="x", owner=owner)
        with pytest.raises(IntegrityError), transaction.atomic():
            AgentInstance.objects.create(slug="demo-agent", name="x", owner=owner)


def test_the_scheduled_prompt_task_addresses_the_owners_conversation(make_user: Any) -> None:
    alice = make_user("alice")
    result = tasks.save_messages("demo-agent", "daily", ["from beat"], alice.pk)
    assert result["status"] == "completed"
    assert AgentInstance.objects.get(name="daily").owner == alice
    tasks.save_messages("demo-agent", "daily", ["to nobody"])
    assert AgentInstance.objects.filter(name="daily", owner=None).exists()


def test_every_transcript_write_marks_the_conversation_updated(make_user: Any) -> None:
    agent = async_to_sync(DemoAgent.aget)("fresh", owner=make_user("alice"))
    created = agent.instance.updated_at
    async_to_sync(agent.save_messages)(["hello"])
    agent.instance.refresh_from_db()
    assert agent.instance.updated_at > created


# --------------------------------------------------------------------------------------- migration
BEFORE = [("agents_app", "0006_chat_recovery")]
AFTER = [("agents_app", "0007_per_user_namespaces")]


def test_the_migration_keeps_owners_and_moves_shared_instances_to_the_global_namespace() -> None:
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(BEFORE)
        old = executor.loader.project_state(BEFORE).apps
        user_model = old.get_model(*get_user_model()._meta.label.split("."))
        old_instance = old.get_model("agents_app", "AgentInstance")
        alice = user_model.objects.create(username="alice")
        kept = old_instance.objects.create(slug="demo-agent", name="default", owner=alice)
        lobby = old_instance.objects.create(slug="shared-room-agent", name="lobby", owner=alice)
        ownerless = old_instance.objects.create(slug="demo-agent", name="nightly", owner=None)

        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps
        new_instance = new.get_model("agents_app", "AgentInstance")
        rows = dict(new_instance.objects.values_list("pk", "owner_id"))
        assert rows == {kept.pk: alice.pk, lobby.pk: None, ownerless.pk: None}
        # Another user now has a "default" of their own.
        bob = new.get_model(*get_user_model()._meta.label.split(".")).objects.create(username="bob")
        new_instance.objects.create(slug="demo-agent", name="default", owner=bob)
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.parametrize(("path", "error"), [
    ("/agents/demo-agent/x%01y", "Invalid instance name 'x\\x01y'"),
    ("/agents/demo-agent/x?owner=a%00b", "There is no user 'a\\x00b'"),
])
async def test_control_characters_in_an_address_are_refused_before_any_lookup(make_user, path, error):
    staff = await make(make_user, "boss", is_staff=True)
    frame, code = await first_frame(path, staff)
    assert (frame["error"], code) == (error, 4404)


async def two_sockets_on_a_new_address(path: str, user: Any) -> tuple[Any, Any]:
    """Two sockets on an address with no row yet, their connect frames read (nothing is stored)."""
    sockets = [(await connect(path, user))[0] for _ in range(2)]
    for a in sockets:
        assert [(await a.receive_json_from())["type"] for _ in range(2)] == [
            "cf_agent_identity", "cf_agent_mcp_servers"]
    return sockets[0], sockets[1]


async def test_a_socket_makes_its_conversation_on_its_first_message_and_a_waiting_one_follows(user):
    """Connecting stores nothing; the first chat request does, and a second socket that waited on
    the same new address is told and follows the reply."""
    path = "/agents/demo-agent/fresh/sub/research-agent/child"
    first, second = await two_sockets_on_a_new_address(path, user)
    await first.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    assert await first.receive_json_from() == {
        "type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}
    await first.send_json_to({"type": "cf_agent_chat_clear"})
    assert await first.receive_nothing(0.2)
    assert await AgentInstance.objects.acount() == 0

    await first.send_json_to(chat_request("r1", [user_message("u1", "hello")]))
    assert text_of(await receive_until(first, is_done("r1"))).startswith("Researching hello.")
    # The waiting socket is told and gets the transcript (live, or as it catches up)...
    frame = await second.receive_json_from(timeout=5)
    while not (frame["type"] == "cf_agent_chat_messages" and any(m["id"] == "u1" for m in frame["messages"])):
        frame = await second.receive_json_from(timeout=5)
    # ...and is in the conversation's group from then on: the next turn streams to it.
    await first.send_json_to(chat_request("r2", [user_message("u2", "again")]))
    assert "Researching again." in text_of(await receive_until(second, is_done("r2")))
    rows = [row async for row in AgentInstance.objects.order_by("pk").values_list("name", "owner_id", "parent__name")]
    assert rows == [("fresh", user.pk, None), ("child", user.pk, "fresh")]
    for a in (first, second):
        await a.disconnect()


async def test_a_waiting_socket_gets_no_frame_of_a_turn_whose_end_its_transcript_holds(user, monkeypatch):
    """A socket that waited on a new address follows the row by joining its group, then reading
    the transcript. When the first turn ends before that read returns, the turn's frames queued for
    the socket meanwhile are older than the transcript: none of them goes out after it (they went:
    the tab showed the reply, then the turn's lead frames without it, then the stream again)."""
    path = "/agents/demo-agent/read-late"
    first, second = await two_sockets_on_a_new_address(path, user)
    joined, turn_ended = asyncio.Event(), asyncio.Event()
    read = ResumeDriver.send_transcript

    async def read_after_the_turn(driver: ResumeDriver) -> None:
        joined.set()  # in the group: the turn's frames queue for this socket from now on
        await turn_ended.wait()
        await read(driver)

    monkeypatch.setattr(ResumeDriver, "send_transcript", read_after_the_turn)
    # Slow enough that the waiting socket joins while the turn streams: it has frames of it queued.
    await first.send_json_to(chat_request("r1", [user_message("u1", "/slow 10 20")]))
    await asyncio.wait_for(joined.wait(), timeout=10)
    reply = text_of(await receive_until(first, is_done("r1"), timeout=10))
    turn_ended.set()

    stored = await second.receive_json_from(timeout=10)
    assert stored["type"] == "cf_agent_chat_messages"
    texts = [(m["role"], "".join(p.get("text", "") for p in m["parts"])) for m in stored["messages"]]
    assert texts == [("user", "/slow 10 20"), ("assistant", reply)]
    # What comes next is the next turn's: its lead frames, its stream, its end.
    await first.send_json_to(chat_request("r2", [user_message("u2", "again")]))
    after = await receive_until(second, is_done("r2"), timeout=10)
    assert {frame["id"] for frame in after if "id" in frame} == {"r2"}
    assert after[0]["type"] == "cf_agent_chat_messages"
    assert [m["id"] for m in after[0]["messages"]][-1] == "u2"
    for a in (first, second):
        await a.disconnect()


async def test_a_probe_finds_the_row_a_request_made_after_the_socket_connected(user):
    """A reconnect to another process can connect before the first message's admission commits:
    its probe, later, is answered for the conversation as it stands then, not as an idle one."""
    path = "/agents/demo-agent/made-meanwhile"
    sock, _, _ = await connect(path, user)
    assert [(await sock.receive_json_from())["type"] for _ in range(2)] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    # Made as another process's admission makes it: the announcement reaches only that process's sockets.
    instance = await AgentInstance.objects.acreate(slug="demo-agent", name="made-meanwhile", owner=user)
    await Turn.objects.acreate(instance=instance, request_id="r1", status=Turn.Status.QUEUED)
    await sock.send_json_to({"type": "cf_agent_stream_resume_request", "probeId": "p1"})
    answer = await sock.receive_json_from()
    assert (answer["type"], answer["probeId"]) == ("cf_agent_stream_pending", "p1")
    await sock.disconnect()


async def test_a_refused_first_message_makes_no_conversation(user):
    """The row is made in the first message's admission (``turns.submit_chat``): a message the model
    cannot read, or one over the user's limit of active turns (refused in that transaction), leaves
    the address without a row, and the socket's next message makes it."""
    path = "/agents/demo-agent/refused"
    sock, _, _ = await connect(path, user)
    assert [(await sock.receive_json_from())["type"] for _ in range(2)] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    unreadable = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": 42}]}
    await sock.send_json_to(chat_request("r1", [unreadable]))
    assert (await sock.receive_json_from())["code"] == "invalid_message"
    with override_settings(AGENT_MAX_ACTIVE_TURNS_PER_USER=0):
        await sock.send_json_to(chat_request("r2", [user_message("u2", "hello")]))
        assert (await sock.receive_json_from())["code"] == "too_many_turns"
    assert not await AgentInstance.objects.aexists()
    await sock.send_json_to(chat_request("r3", [user_message("u3", "now")]))
    assert text_of(await receive_until(sock, is_done("r3"))).endswith("now")
    assert [name async for name in AgentInstance.objects.values_list("name", flat=True)] == ["refused"]
    await sock.disconnect()


async def test_the_first_message_over_rest_makes_the_conversation_and_tells_a_waiting_socket(user):
    from rest_framework.test import APIClient

    waiting, _, _ = await connect("/agents/demo-agent/by-rest", user)
    assert [(await waiting.receive_json_from())["type"] for _ in range(2)] == [
        "cf_agent_identity", "cf_agent_mcp_servers"]
    client = APIClient()
    await database_sync_to_async(client.force_authenticate)(user)
    response = await database_sync_to_async(client.post)(
        "/api/agents/demo-agent/by-rest/messages/", {"text": "over HTTP"}, format="json")
    assert response.status_code == 202
    instance = await AgentInstance.objects.aget(name="by-rest")
    assert instance.owner_id == user.pk
    frame = await waiting.receive_json_from()
    while frame.get("type") != "cf_agent_chat_messages" or not frame["messages"]:
        frame = await waiting.receive_json_from()
    assert frame["messages"][0]["parts"] == [{"type": "text", "text": "over HTTP"}]
    await waiting.disconnect()


async def test_a_row_whose_maker_stopped_waiting_is_still_announced(user):
    """``registry.amaterialize`` makes the row and announces it although its caller was cancelled
    (a socket closed mid-message), as when the database thread did both."""
    unsaved = await database_sync_to_async(registry.locate)("demo-agent", "orphaned", user)
    layer = get_channel_layer()
    listener = await layer.new_channel()
    await layer.group_add(registry.pending_group(unsaved), listener)
    making = asyncio.ensure_future(registry.amaterialize(unsaved))
    await asyncio.sleep(0)  # it has handed the work to a task of its own
    making.cancel()
    with pytest.raises(asyncio.CancelledError):
        await making
    event = await asyncio.wait_for(layer.receive(listener), timeout=60)
    stored = await AgentInstance.objects.aget(name="orphaned")
    assert event == {"type": registry.CREATED_EVENT, "pk": stored.pk}


async def test_a_row_made_in_a_callers_transaction_is_announced_when_it_commits(user):
    """Reached through ``async_to_sync`` inside ``transaction.atomic``, ``amaterialize`` tells the
    waiting sockets on commit: told before, a socket of another process would find no row and
    never follow the conversation."""
    unsaved = await database_sync_to_async(registry.locate)("demo-agent", "in-a-transaction", user)
    layer = get_channel_layer()
    listener = await layer.new_channel()
    await layer.group_add(registry.pending_group(unsaved), listener)

    async def not_yet() -> None:
        # The in-memory layer delivers as it sends: an announcement would be waiting already.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(layer.receive(listener), timeout=0.05)

    def make() -> int:
        with transaction.atomic():
            stored = async_to_sync(registry.amaterialize)(unsaved)
            async_to_sync(not_yet)()
        return stored.pk

    pk = await database_sync_to_async(make)()
    assert await asyncio.wait_for(layer.receive(listener), timeout=60) == {"type": registry.CREATED_EVENT, "pk": pk}


def test_the_address_lookup_reads_the_row_of_its_namespace_with_its_owner(make_user: Any) -> None:
    """``registry.locate``'s one statement finds what the ORM's ``select_related("owner")`` query
    found: the row of the namespace named (a user's, or the global one), its owner with it."""
    alice, bob = make_user("alice"), make_user("bob")
    rows = {owner: AgentInstance.objects.create(slug="demo-agent", name="same", owner=owner) for owner in (alice, None)}
    AgentInstance.objects.create(slug="demo-agent", name="child", owner=alice, parent=rows[alice])
    for owner, row in rows.items():
        found = registry._stored("demo-agent", "same", owner)
        assert found is not None and found.pk == row.pk and found.owner_id == (owner.pk if owner else None)
        with CaptureQueriesContext(connection) as queries:
            assert found.owner == owner
        assert len(queries) == 0
    assert registry._stored("demo-agent", "same", bob) is None
    assert registry._stored("demo-agent", "child", alice) is None  # a sub-agent has no top-level address
    unsaved = registry.locate("demo-agent", "new", alice)
    assert unsaved.pk is None and unsaved.owner == alice


def test_a_first_message_that_loses_the_race_for_its_address_gets_the_row_the_winner_made(make_user: Any) -> None:
    """Another request made the row after this connection read its address: the insert writes
    nothing, and the row is read instead, not made twice; the announcement is the winner's, and
    ``post_save`` (declared schedules hang on it) is sent for the row made, once."""
    alice = make_user("alice")
    saved: list[tuple[int, bool]] = []

    def receiver(sender: Any, instance: AgentInstance, created: bool, **kwargs: Any) -> None:
        saved.append((instance.pk, created))

    post_save.connect(receiver, sender=AgentInstance)
    try:
        unsaved = registry.locate("demo-agent", "raced", alice)
        winner = registry.materialize(registry.locate("demo-agent", "raced", alice))
        with transaction.atomic():  # as in an admission: the lost race leaves the transaction usable
            stored, created = registry._materialized(unsaved)
            assert AgentInstance.objects.filter(pk=winner.pk).exists()
    finally:
        post_save.disconnect(receiver, sender=AgentInstance)
    assert stored.pk == winner.pk and created == []
    assert saved == [(winner.pk, True)]
    assert (winner.owner_id, winner.created_at is not None, winner.updated_at is not None) == (alice.pk, True, True)
    child = registry._child(winner, "demo-agent", "kid")
    made = registry.materialize(registry._child(winner, "demo-agent", "kid"))
    assert registry._materialized(child) == (made, [])
    assert AgentInstance.objects.filter(name__in=["raced", "kid"]).count() == 2
