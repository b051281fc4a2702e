"""Many WebSockets at once, one turn each: what ``bench/load.py`` measures and ``test_load.py`` checks.

Each socket belongs to a user of its own (sessions made in bulk, ``make_sessions``), as a real
crowd would, so the per-user turn limit does not refuse them. ``one_turn`` opens a socket, reads
the connect frames, sends one chat request and reads until its terminal frame; it never raises:
whatever went wrong (refused handshake, a close, an error frame, a timeout) is its ``Outcome``.
"""

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import connect

from tests.support.frames import chat_request, user_message
from tests.support.live import LiveStack

RESP = "cf_agent_use_chat_response"

# Settings of the servers: the demo agents plus a shared one (one instance, many users).
SETTINGS = "tests.support.settings_live"
SHARED_AGENT = "shared-room-agent"

_SESSIONS = r"""
import sys
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore
User = get_user_model()
prefix, count = sys.argv[1], int(sys.argv[2])
users = User.objects.bulk_create([User(username=f"{prefix}{i}") for i in range(count)])
for user in User.objects.filter(username__startswith=prefix).order_by("pk"):
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    print(f"sessionid={session.session_key}")
"""


def make_sessions(stack: LiveStack, count: int, prefix: str = "load") -> list[str]:
    """``count`` new users, each logged in: their ``Cookie`` header values (one process, no password hashing)."""
    script = f"import sys; sys.argv = ['x', {prefix!r}, '{count}']\n" + _SESSIONS
    return [line for line in stack.manage("shell", "-c", script).splitlines() if line.startswith("sessionid=")]


@dataclass
class Outcome:
    """One socket's turn. Times in seconds: ``connected`` from the start of the handshake, the
    others from the send of the request."""

    ok: bool
    connected: float | None = None
    first_chunk: float | None = None
    total: float | None = None
    error: str = ""


async def one_turn(ws_base: str, path: str, cookie: str, request_id: str, text: str, *,
                   timeout: float = 120) -> Outcome:
    """Open ``path``, do one turn of ``text``; never raises (see the module docstring)."""
    started = time.monotonic()
    deadline = started + timeout
    try:
        sock = await connect(f"{ws_base}{path}", additional_headers={"Origin": "http://localhost", "Cookie": cookie},
                             max_size=None, compression=None, open_timeout=timeout, close_timeout=2)
    except Exception as exc:
        return Outcome(False, error=f"{type(exc).__name__}: {exc}")
    try:
        return await _turn(sock, request_id, text, started, deadline)
    except Exception as exc:
        return Outcome(False, error=f"{type(exc).__name__}: {exc}")
    finally:
        await sock.close()


async def _turn(sock: Any, request_id: str, text: str, started: float, deadline: float) -> Outcome:
    async def frame() -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(sock.recv(), max(0.001, deadline - time.monotonic())))

    while (await frame()).get("type") != "cf_agent_mcp_servers":
        pass
    connected = time.monotonic() - started
    sent = time.monotonic()
    await sock.send(json.dumps(chat_request(request_id, [user_message(f"u-{request_id}", text)])))
    first = None
    while True:
        data = await frame()
        if data.get("type") == "cf_agent_error":
            return Outcome(False, connected, error=f"error frame {data.get('code')}: {data.get('error')}")
        if data.get("type") != RESP or data.get("id") != request_id:
            continue
        if data.get("error"):
            return Outcome(False, connected, error=f"turn error: {data.get('body')}")
        if first is None and data.get("body") and not data.get("done"):
            first = time.monotonic() - sent
        if data.get("done"):
            outcome = data.get("outcome")
            ok = outcome in (None, "completed")
            return Outcome(ok, connected, first, time.monotonic() - sent, "" if ok else f"outcome {outcome}")


async def crowd(ws_bases: list[str], cookies: list[str], *, shared_room: str | None = None, text: str = "hello",
                timeout: float = 120, prefix: str = "load") -> list[Outcome]:
    """One socket per cookie, all at once, spread round-robin over ``ws_bases``: each does one turn.

    Each socket talks to its user's own instance (``<prefix>-<i>``), or with ``shared_room`` all to
    that one instance of the shared agent (their turns queue there, one after another).
    """
    def path(i: int) -> str:
        return f"/agents/{SHARED_AGENT}/{shared_room}" if shared_room else f"/agents/demo-agent/{prefix}-{i}"

    return list(await asyncio.gather(*(
        one_turn(ws_bases[i % len(ws_bases)], path(i), cookie, f"r{i}", f"{text} {i}", timeout=timeout)
        for i, cookie in enumerate(cookies)
    )))
