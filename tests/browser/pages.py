"""Helpers for browser tests: the live server handle, logging in, and WebSocket taps/fakes.

``FrameTap`` sits between the page and the real server and records every frame both ways.
``FakeAgentServer`` replaces the server's WebSocket entirely, so tests can script protocol
features (resume, approvals, client tools, continuations) frame by frame.
"""

import json
import re
from collections.abc import Callable
from typing import Any

from playwright.sync_api import Page, WebSocketRoute

from tests.support.live import LiveStack, Server
from tests.support.waiting import wait_until

USERNAME = "alice"
PASSWORD = "pw"
# A second user with a namespace of their own.
OTHER_USER = "bob"
# A staff user (not a superuser) with ``agents_app.approve_action``: decides parked actions in the admin.
APPROVER = "approver"
# A superuser: sees every admin page.
SUPERUSER = "root"
AGENT = "demo-agent"
WS_PATTERN = re.compile(r"^wss?://[^/]+/agents/")
RESP = "cf_agent_use_chat_response"

Frame = dict[str, Any]


class Live:
    """The running server and what tests need to reach it."""

    def __init__(self, stack: LiveStack, daphne: Server) -> None:
        self.stack = stack
        self.daphne = daphne
        self.http = daphne.http

    def chat_url(self, name: str, agent: str = AGENT, query: str = "") -> str:
        return f"{self.http}/chat/{agent}/{name}/{query}"


# What the offline demo model says before echoing the user's text.
ECHO = "(demo model, offline) You said: "
# JS: the concatenated text of the last assistant message.
LAST_ASSISTANT_TEXT = """() => {
  const msgs = document.querySelectorAll('.msg.assistant');
  const last = msgs[msgs.length - 1];
  return last ? [...last.querySelectorAll('.part.text')].map(t => t.textContent).join('') : '';
}"""

def create_approver(stack: LiveStack, username: str = APPROVER, password: str = PASSWORD) -> None:
    """Create the staff approver in the live stack's database (one ``manage.py shell``)."""
    code = (
        "from django.contrib.auth import get_user_model as g;"
        "from django.contrib.auth.models import Permission as P;"
        f"u=g().objects.create_user({username!r}, password={password!r}, is_staff=True);"
        "u.user_permissions.add(P.objects.get(codename='approve_action', content_type__app_label='agents_app'))"
    )
    stack.manage("shell", "-c", code)


def login(page: Page, live: Live, username: str = USERNAME, password: str = PASSWORD) -> None:
    """Log in through the real login form."""
    page.goto(f"{live.http}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("#login-form button[type=submit]")
    page.wait_for_url(f"{live.http}/")


def open_chat(page: Page, live: Live, name: str, *, connected: bool = True, query: str = "") -> None:
    """Open the chat page; wait until history is loaded (and the socket is connected)."""
    page.goto(live.chat_url(name, query=query))
    page.wait_for_selector("#chat[data-ready=true]")
    if connected:
        page.wait_for_selector("#status[data-state=connected]")


def send_message(page: Page, text: str) -> None:
    page.fill("#input", text)
    page.click("#send")


def assistant_texts(page: Page) -> list[str]:
    return page.eval_on_selector_all(
        ".msg.assistant", "els => els.map(e => [...e.querySelectorAll('.part.text')].map(t => t.textContent).join(''))"
    )


def user_texts(page: Page) -> list[str]:
    return page.eval_on_selector_all(".msg.user .part.text", "els => els.map(e => e.textContent)")


def chunk(request_id: str, body: Frame, seq: int, **flags: Any) -> Frame:
    return {"body": json.dumps(body), "done": False, "id": request_id, "type": RESP, "seq": seq, **flags}


def done(request_id: str, **flags: Any) -> Frame:
    return {"body": "", "done": True, "id": request_id, "type": RESP, **flags}


class FrameTap:
    """Forward the page's socket to the real server, recording frames (``out``: page → server)."""

    def __init__(self, page: Page) -> None:
        self.out: list[Frame] = []
        self.inbound: list[Frame] = []
        self.sockets = 0
        self._pairs: list[tuple[WebSocketRoute, WebSocketRoute]] = []
        page.route_web_socket(WS_PATTERN, self._connect)

    def drop(self) -> None:
        """Cut the newest connection on both sides, as a network failure would."""
        page_side, server_side = self._pairs[-1]
        server_side.close(code=1001, reason="test drop")
        page_side.close(code=1011, reason="test drop")

    def _connect(self, ws: WebSocketRoute) -> None:
        self.sockets += 1
        server = ws.connect_to_server()
        self._pairs.append((ws, server))

        def from_page(message: str | bytes) -> None:
            self.out.append(json.loads(message))
            server.send(message)

        def from_server(message: str | bytes) -> None:
            self.inbound.append(json.loads(message))
            ws.send(message)

        ws.on_message(from_page)
        server.on_message(from_server)

    def sent(self, frame_type: str) -> list[Frame]:
        return [f for f in self.out if f.get("type") == frame_type]


class FakeAgentServer:
    """A scripted stand-in for the server's WebSocket (the page's HTTP still goes to the live server).

    On connect it sends identity and MCP frames like the real server. Each received frame is
    recorded with the index of its socket; ``on_frame`` lets a test answer frames as they come.
    By default a resume probe is answered with ``cf_agent_stream_resume_none``.
    """

    def __init__(self, page: Page, *, on_connect: Callable[["FakeAgentServer", WebSocketRoute], None] | None = None,
                 auto_resume_none: bool = True) -> None:
        self.page = page
        self.sockets: list[WebSocketRoute] = []
        self.received: list[tuple[int, Frame]] = []
        self.closed: list[tuple[int, int | None]] = []
        self.on_frame: Callable[[int, Frame], None] | None = None
        self.on_connect = on_connect
        self.auto_resume_none = auto_resume_none
        page.route_web_socket(WS_PATTERN, self._connect)

    def _connect(self, ws: WebSocketRoute) -> None:
        index = len(self.sockets)
        self.sockets.append(ws)
        ws.on_message(lambda message: self._receive(index, message))
        ws.on_close(lambda code, reason: self.closed.append((index, code)))
        if self.on_connect is not None:
            self.on_connect(self, ws)
            return
        ws.send(json.dumps({"type": "cf_agent_identity", "name": "fake", "agent": AGENT}))
        ws.send(json.dumps({"mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []},
                            "type": "cf_agent_mcp_servers"}))

    def _receive(self, index: int, message: str | bytes) -> None:
        frame = json.loads(message)
        self.received.append((index, frame))
        if self.on_frame is not None:
            self.on_frame(index, frame)
        elif self.auto_resume_none and frame.get("type") == "cf_agent_stream_resume_request":
            self.send({"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": frame.get("probeId")},
                      index)

    def send(self, frame: Frame, socket: int = -1) -> None:
        self.sockets[socket].send(json.dumps(frame))

    def close(self, socket: int = -1, code: int = 1011, reason: str = "") -> None:
        self.sockets[socket].close(code=code, reason=reason)

    def frames(self, frame_type: str, socket: int | None = None) -> list[Frame]:
        return [f for i, f in self.received if f.get("type") == frame_type and (socket is None or i == socket)]

    def wait_for(self, frame_type: str, count: int = 1, socket: int | None = None, timeout: float = 10.0) -> Frame:
        wait_until(lambda: len(self.frames(frame_type, socket)) >= count, f"{count} x {frame_type} from the page",
                   timeout=timeout, interval=0.02, page=self.page)
        return self.frames(frame_type, socket)[count - 1]

    def wait_for_sockets(self, count: int, timeout: float = 10.0) -> None:
        wait_until(lambda: len(self.sockets) >= count, f"{count} sockets", timeout=timeout, interval=0.02,
                   page=self.page)
