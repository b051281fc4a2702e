"""``agents_app.web.sessions``: the session and its user read by a statement each, with Django's outcomes."""

from datetime import timedelta
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.backends import ModelBackend
from django.contrib.sessions.backends.db import SessionStore as DjangoSessionStore
from django.contrib.sessions.models import Session
from django.core.exceptions import SynchronousOnlyOperation
from django.test import Client
from django.utils import timezone

from agents_app.web.sessions import SessionStore, UserBackend
from tests.conftest import ORIGIN
from tests.support.sessions import session_key
from thinkproject.asgi import application
from thinkproject.middleware import websocket_auth_stack

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_session_loads_as_djangos_does() -> None:
    stored = DjangoSessionStore()
    stored.update({"a": 1, "nested": {"b": [1, 2]}})
    stored.save()
    key = stored.session_key
    assert SessionStore(key).load() == DjangoSessionStore(key).load() == {"a": 1, "nested": {"b": [1, 2]}}
    Session.objects.filter(session_key=key).update(expire_date=timezone.now() - timedelta(seconds=1))
    for store in (SessionStore(key), DjangoSessionStore(key)):
        assert (store.load(), store.session_key) == ({}, None)  # expired: no data, and a new key when saved
    for missing in (SessionStore("no-such-session-key"), SessionStore(None)):
        assert (missing.load(), missing.session_key) == ({}, None)


def test_the_user_is_read_as_the_model_backend_reads_it(make_user: Any) -> None:
    alice, idle = make_user("alice", email="a@example.com"), make_user("idle", is_active=False)
    ours, django = UserBackend(), ModelBackend()
    for user_id in (alice.pk, str(alice.pk)):
        found = ours.get_user(user_id)
        expected = django.get_user(user_id)
        assert found is not None and expected is not None
        fields = [field.attname for field in type(alice)._meta.concrete_fields]
        assert [getattr(found, name) for name in fields] == [getattr(expected, name) for name in fields]
    for user_id in (idle.pk, alice.pk + idle.pk + 100, "not a number"):
        assert ours.get_user(user_id) is None


async def test_a_socket_with_a_logged_out_session_is_refused(user: Any) -> None:
    key = await database_sync_to_async(session_key)(user)

    async def first_frame() -> dict[str, Any]:
        socket = WebsocketCommunicator(application, "/agents/demo-agent/default",
                                       headers=[ORIGIN, (b"cookie", f"sessionid={key}".encode())])
        assert (await socket.connect())[0]
        frame = await socket.receive_json_from()
        await socket.disconnect()
        return frame

    assert (await first_frame())["type"] == "cf_agent_identity"

    def log_out() -> None:
        client = Client()
        client.cookies["sessionid"] = key
        assert client.post("/accounts/logout/").status_code == 302
        assert not Session.objects.filter(session_key=key).exists()

    await database_sync_to_async(log_out)()
    assert (await first_frame())["code"] == "NotAuthenticated"


async def test_a_sockets_user_is_read_where_it_is_first_used(user: Any) -> None:
    """The WebSocket stack leaves ``scope["user"]`` unread; the consumer's first database hop reads
    it, as Channels' ``get_user`` does. Used first on the event loop, it fails as the ORM does there."""
    key = await database_sync_to_async(session_key)(user)
    scopes: list[dict[str, Any]] = []

    async def consumer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)

    stack = websocket_auth_stack(consumer)
    for cookie in (f"sessionid={key}", "sessionid=no-such-session", ""):
        await stack({"type": "websocket", "path": "/", "headers": [(b"cookie", cookie.encode())]}, None, None)
    signed_in, unknown, none = (scope["user"] for scope in scopes)
    with pytest.raises(SynchronousOnlyOperation):
        assert signed_in.is_authenticated
    assert await database_sync_to_async(lambda: (signed_in.pk, signed_in.is_authenticated))() == (user.pk, True)
    assert signed_in.get_username() == user.get_username()  # read once: the loop uses it as it is
    for anonymous in (unknown, none):
        assert await database_sync_to_async(lambda u=anonymous: u.is_authenticated)() is False
