"""A rolling restart under live replies: what ``bench/deploy.py`` measures and ``test_deploy_live.py`` checks.

Each chat streams a ``/slow`` reply of numbered words (``w0 w1 …``) on one server. When its server
closes the socket (a deploy: uvicorn closes every WebSocket with 1012 on ``SIGTERM``), it reconnects
to a server still in ``Pool`` after ``RECONNECT_DELAY`` (about what ``useAgentChat``'s backoff
waits), probes for the live stream and ACKs it, and ACKs every stream announced to it (the
continuation), as the npm client does; a transcript it is sent shows the reply as stored.

It keeps the words in order as the user sees them. A word it has already is expected in a replay,
or after the stream starts again (the ACK of a live stream sends it from its ``start``; a
continuation never does); any other is *doubled*. A word that skips ahead leaves a hole that only
a replay or the stored reply fills (a chat that never fills it times out). The gap between two new
words is what the user waits.

A chat is over once the reply is *stored* too, not when its last word arrives: live words leave
before the end of the turn stores the reply (one transaction, then the final transcript, then the
terminal frame: docs/architecture.md#end-of-a-turn), and until then ``get-messages`` holds what was
stored before, such as the partial reply a hand-off left. So a chat ends at the terminal frame of
the stream that brought its last word, or at a stored transcript that has every word.
"""

import asyncio
import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.support.frames import RESP, chat_request, message_text, user_message

RECONNECT_DELAY = 0.2
_WORD = re.compile(r"^w(\d+) $")


class Pool:
    """The servers a client may (re)connect to: what a load balancer would route to."""

    def __init__(self, ws_bases: list[str]) -> None:
        self.ws_bases = list(ws_bases)
        self._rng = random.Random(30)

    def pick(self, avoid: str | None = None) -> str:
        choices = [base for base in self.ws_bases if base != avoid] or self.ws_bases
        return self._rng.choice(choices)


def expected_text(words: int) -> str:
    return "".join(f"w{i} " for i in range(words))


@dataclass
class Chat:
    """One live chat's view of its reply."""

    path: str
    words: int
    seen: list[int] = field(default_factory=list)
    doubled: int = 0
    # Live words that came ahead of a missing one (ignored: a replay or the stored reply fills the hole).
    ahead: int = 0
    # The reply's stream started again from its first chunk: the words already seen come again.
    restarted: bool = False
    reconnects: int = 0
    gaps: list[float] = field(default_factory=list)
    last_new: float | None = None
    error: str = ""
    # The request whose stream brought the last word (its terminal frame says the reply is stored).
    last_request: str | None = None
    # The reply is stored whole: its stream's terminal frame came, or a stored transcript had every word.
    stored_whole: bool = False

    @property
    def complete(self) -> bool:
        return len(self.seen) == self.words

    @property
    def over(self) -> bool:
        """Every word seen and the reply stored (module docstring): what ``get-messages`` returns is final."""
        return self.complete and self.stored_whole

    def word(self, index: int, replay: bool, request_id: str | None = None) -> None:
        if index < len(self.seen):
            if not (replay or self.restarted):
                self.doubled += 1
            return
        self.restarted = False
        if index > len(self.seen):
            self.ahead += 1
            return
        now = time.monotonic()
        if self.last_new is not None:
            self.gaps.append(now - self.last_new)
        self.last_new = now
        self.seen.append(index)
        self.last_request = request_id

    def stored(self, text: str) -> None:
        """The reply as stored (``get-messages``, or a transcript frame)."""
        for match in re.finditer(r"w(\d+) ", text):
            self.word(int(match.group(1)), replay=True)
        if text == expected_text(self.words):
            self.stored_whole = True

    def feed(self, frame: dict[str, Any]) -> None:
        if frame.get("type") == "cf_agent_chat_messages":  # the transcript: the reply as stored so far
            messages = frame.get("messages") or []
            if messages and messages[-1].get("role") == "assistant":
                self.stored(message_text(messages[-1]))
            return
        if frame.get("type") != RESP:
            return
        if frame.get("done"):
            # The end of the turn that brought the last word: the reply was stored before it was
            # sent. A cut (``recovering``) stores nothing: the next attempt stores the reply.
            if self.complete and frame.get("id") == self.last_request and frame.get("outcome") != "recovering":
                self.stored_whole = True
            return
        if not frame.get("body"):
            return
        chunk = json.loads(frame["body"])
        if chunk.get("type") == "start" and not frame.get("continuation"):
            self.restarted = True  # the stream again from its start (the ACK of a live stream): the client rebuilds
        if chunk.get("type") == "text-delta" and (match := _WORD.match(chunk.get("delta", ""))):
            self.word(int(match.group(1)), bool(frame.get("replay")), frame.get("id"))


async def _open(ws_base: str, path: str, cookie: str) -> ClientConnection:
    sock = await connect(
        f"{ws_base}{path}",
        additional_headers={"Origin": "http://localhost", "Cookie": cookie},
        max_size=None,
        compression=None,
        open_timeout=30,
        close_timeout=1,
    )
    while json.loads(await asyncio.wait_for(sock.recv(), 30)).get("type") != "cf_agent_mcp_servers":
        pass
    return sock


async def live_chat(pool: Pool, chat: Chat, cookie: str, get_messages: Any, *, timeout: float = 120) -> Chat:
    """Run ``chat``'s turn to its end (``Chat.over``) across server restarts; never raises (``chat.error``).

    ``get_messages(path)``: the stored transcript, read when a reconnect finds no live stream.
    """
    deadline = time.monotonic() + timeout
    base = pool.pick()
    try:
        sock = await _open(base, chat.path, cookie)
        await sock.send(json.dumps(chat_request("r1", [user_message("u1", f"/slow {chat.words} 20")])))
        while not chat.over:
            try:
                frame = json.loads(await asyncio.wait_for(sock.recv(), max(0.01, deadline - time.monotonic())))
            except ConnectionClosed:
                chat.reconnects += 1
                await asyncio.sleep(RECONNECT_DELAY)
                base = pool.pick(avoid=base)
                sock = await _resume(base, chat, cookie, get_messages)
                continue
            if frame.get("type") == "cf_agent_stream_resuming":  # a stream to follow (a continuation): ACK it
                await sock.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": frame["id"]}))
            chat.feed(frame)
        await sock.close()
    except Exception as exc:
        chat.error = f"{type(exc).__name__}: {exc}"
    return chat


async def _resume(base: str, chat: Chat, cookie: str, get_messages: Any) -> ClientConnection:
    """Reconnect, probe, and ACK the live stream (or load the stored reply when none is live)."""
    sock = await _open(base, chat.path, cookie)
    await sock.send(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
    while True:
        frame = json.loads(await asyncio.wait_for(sock.recv(), 30))
        if frame["type"] == "cf_agent_stream_resuming":
            await sock.send(json.dumps({"type": "cf_agent_stream_resume_ack", "id": frame["id"]}))
        chat.feed(frame)
        if frame.get("probeId") != "p":
            continue
        if frame["type"] != "cf_agent_stream_resuming":  # nothing live now: what is stored, then what streams next
            messages = await asyncio.to_thread(get_messages, chat.path)
            if messages and messages[-1]["role"] == "assistant":
                chat.stored(message_text(messages[-1]))
        return sock


def stored_reply(messages: list[dict[str, Any]]) -> tuple[list[str], str]:
    """The roles of a transcript and its last message's text."""
    return [m["role"] for m in messages], message_text(messages[-1]) if messages else ""
