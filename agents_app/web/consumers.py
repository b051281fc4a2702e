"""``ChatConsumer``: the WebSocket adapter. It parses frames and calls services; nothing more.

Each connection joins its instance's group and relays the ``chat.frames`` events that the turn
engine publishes from any process.
"""

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer

from .. import conf, registry, rpc, turns
from ..errors import AgentAccessError
from ..lifecycle import connections
from ..lifecycle import service as lifecycle
from ..mcp import service as mcp
from ..mcp import state as mcp_state
from ..metrics import instruments as metrics
from ..models import AgentInstance
from ..protocol import frames, parse
from ..streaming import fanout
from ..streaming.items import decode_batch
from ..streaming.resume import ResumeDriver
from . import limits
from ._relay import dispatch_in_turn

logger = logging.getLogger("agents_app.web.consumers")
# How uvicorn's websockets-sansio refuses a send once it has closed the socket itself (``_send_unless_gone``).
_SERVER_CLOSED = "after sending 'websocket.close'"

# Frames above this many characters are decoded on a worker thread, not on the event loop that
# serves every other connection of the process (a 3 MB chat request takes ~70 ms to decode).
OFF_LOOP_CHARS = 256 * 1024
# The answer to a frame whose handling failed for a reason of ours (logged with its traceback).
INTERNAL_ERROR = "The server could not handle this frame; nothing was changed by it"


def _located(slug: str, name: str, user: Any, owner: str | None,
             sub: list[tuple[str, str]]) -> tuple[AgentInstance, mcp_state.Snapshot | None]:
    """``registry.locate``, and an unsaved instance's MCP state with it (its class's servers: it has
    no runtime ones, so nothing changes it before it goes out). A connect's first database hop,
    where ``scope["user"]`` is read too (``thinkproject.middleware.UserOnFirstUseMiddleware``)."""
    instance = registry.locate(slug, name, user, owner, sub)
    return instance, mcp.snapshot(instance) if instance.pk is None else None


class ChatConsumer(AsyncWebsocketConsumer):
    """``/agents/<slug>/<name>[/sub/<slug>/<name>...][?owner=<username>]``: the ``cf_agent_*`` protocol
    for one agent instance (or one of its sub-agents).

    The name is read in the logged-in user's namespace; staff add ``owner`` to reach another's.
    """

    instance: AgentInstance | None = None
    resume: ResumeDriver | None = None
    rate: limits.TokenBucket | None = None
    # The client went away (the server refused a send): nothing more is sent to it.
    gone = False
    # This socket as ``on_connect``/``on_close`` see it (``agents_app.lifecycle.connections``), once located.
    connection: connections.Connection | None = None
    close_reason = ""
    _server_send: Callable[[dict[str, Any]], Awaitable[None]]

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[dict[str, Any]]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Channels' ``AsyncConsumer.__call__``, with the messages of the client and of the channel
        layer dispatched by ``_relay.dispatch_in_turn`` instead of Channels' loop (a task per
        message), and every send going through ``_send_unless_gone``."""
        self._server_send = send
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        sources: list[Callable[[], Awaitable[dict[str, Any]]]] = [receive]
        if self.channel_layer is not None:
            self.channel_name = await self.channel_layer.new_channel()
            self.channel_receive = functools.partial(self.channel_layer.receive, self.channel_name)
            sources.append(self.channel_receive)
        self.base_send = self._send_unless_gone
        with contextlib.suppress(StopConsumer):  # the consumer's own end (``close``, a disconnect)
            await dispatch_in_turn(sources, self.dispatch)

    async def _send_unless_gone(self, message: dict[str, Any]) -> None:
        """Send ``message``, or drop it once the client is gone.

        A client can go in the middle of a handler (a text frame that is not UTF-8 makes the server
        close the socket, 1007, while the answer to the frame before or a reply's relay is on its
        way), and the server refuses the send with an ``OSError`` (ASGI; uvicorn's
        ``ClientDisconnected``) or, from uvicorn's ``websockets-sansio`` between its own close frame
        and the connection's end, a ``RuntimeError`` "… after sending 'websocket.close'". A normal
        end, not a failure: raised, it was a logged traceback, or it ended the consumer before
        ``disconnect`` left the group. ``websocket.disconnect`` follows.
        """
        if self.gone:
            return
        try:
            await self._server_send(message)
        except (OSError, RuntimeError) as exc:
            if isinstance(exc, RuntimeError) and _SERVER_CLOSED not in str(exc):
                raise
            self.gone = True
            logger.debug("The client of %s went away; what was left to send is dropped (%r)", self.instance, exc)

    async def connect(self) -> None:
        kwargs = self.scope["url_route"]["kwargs"]
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        # The last ``owner`` wins, as in Django's QueryDict; absent: the user's own namespace.
        owner = query.get(registry.OWNER_PARAMETER, [None])[-1]
        await self.accept()
        metrics.OPEN_SOCKETS.inc()  # and dec() in disconnect, which every accepted connection reaches
        try:
            # Connecting stores nothing: a new address stays unsaved until its first message.
            self.instance, servers = await database_sync_to_async(_located)(
                kwargs["slug"], kwargs["name"], self.scope.get("user"), owner,
                registry.parse_sub_path(kwargs.get("sub", "")),
            )
        except AgentAccessError as exc:
            await self.send_frame(frames.error(message=str(exc), code=type(exc).__name__))
            await self.close(code=int(exc.close_code))
            return
        self.connection = connections.Connection(self.channel_name, self.scope.get("user"), self.send, self.close)
        if not await connections.opened(self.instance, self.connection, self.scope):
            return  # refused by the agent's on_connect: nothing of the conversation goes out
        # The first connection of this process looks for turns a crash left running.
        turns.sweep_on_startup()
        self.rate = limits.TokenBucket(**conf.get("AGENT_FRAME_RATE"))
        if self.instance.pk is None:
            # Until its first message: only the row's creation reaches it (``registry.CREATED_EVENT``).
            await registry.wait_for_row(self.instance, self.channel_name)
        else:
            # An active or coming stream is announced first, before identity (docs/protocol.md#connect-sequence).
            await self.join(self.instance)
        await self.send_frame(frames.identity(name=self.instance.name, agent=self.instance.slug))
        if servers is None:  # a stored instance's, read once in its group: a later change is broadcast to it
            servers = await database_sync_to_async(mcp.snapshot)(self.instance)
        await self.send_frame(servers.frame())

    async def join(self, instance: AgentInstance, *, resume: bool = True) -> None:
        """Follow a stored instance: its group, and (``resume``) the resume handshake of this connection."""
        self.instance = instance
        await self.channel_layer.group_add(fanout.group_name(instance.pk), self.channel_name)
        self.resume = ResumeDriver(instance, self.channel_name, self.send_frame, self.send_text)
        if resume:
            await self.resume.connect()

    async def adopt(self, instance: AgentInstance, made_here: bool = False) -> None:
        """The address this connection waited on now has a row (made by another connection, a REST
        call or code, or by this one's first message).

        The transcript goes out instead of a resume announcement, whose ACK would hold back the
        frames that lead the first turn (the sender's own request's answer among them, and the
        sender never owes that ACK): read after joining the group, it holds what came before, the
        frames of turns it holds the end of are dropped, and a turn's stream joined midway is
        replayed as any gap is (``streaming.resume.ResumeDriver.send_transcript``). ``made_here``:
        the row is this connection's first message's, made with its admission, and nothing came
        before it.
        """
        if self.instance is None or self.instance.pk is not None:
            return
        await registry.stop_waiting(self.instance, self.channel_name)
        await self.join(instance, resume=False)
        if not made_here:
            assert self.resume is not None
            await self.resume.send_transcript()

    async def conversation_created(self, event: dict[str, Any]) -> None:
        """Another connection, a REST call or code made the row this connection waited for."""
        if self.instance is None or self.instance.pk is not None:
            return
        instance = await AgentInstance.objects.select_related("owner").filter(pk=event["pk"]).afirst()
        if instance is not None:
            await self.adopt(instance)

    async def websocket_disconnect(self, message: dict[str, Any]) -> None:
        self.close_reason = message.get("reason") or ""  # for on_close; the server may not give one
        await super().websocket_disconnect(message)

    async def agent_destroyed(self, event: dict[str, Any]) -> None:
        """The instance was destroyed (``agents_app.lifecycle.service``): the client reconnects to an empty one."""
        await self.close(code=lifecycle.DESTROYED_CLOSE_CODE, reason=lifecycle.DESTROYED_REASON)

    async def disconnect(self, code: int) -> None:
        metrics.OPEN_SOCKETS.dec()
        if self.connection is not None and self.instance is not None:
            await connections.closed(self.instance, self.connection, code, self.close_reason)
        if self.resume is not None:
            self.resume.close()
        if self.instance is not None and self.instance.pk is None:
            await registry.stop_waiting(self.instance, self.channel_name)
        elif self.instance is not None:
            await self.channel_layer.group_discard(fanout.group_name(self.instance.pk), self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Every frame gets its effect or an error frame; the socket stays open either way."""
        if self.instance is None or (self.connection is not None and self.connection.closed):
            return
        raw = text_data if text_data is not None else bytes_data or b""
        try:
            if self.rate is not None and not self.rate.take():
                raise parse.ProtocolError(limits.RATE_LIMITED_MESSAGE, code="rate_limited")
            await self.dispatch_event(await self.decode(raw))
        except parse.ProtocolError as exc:
            await self.send_frame(frames.error(message=str(exc), code=exc.code, request_id=exc.request_id))
        except Exception:  # an adapter edge: our failure becomes an error frame, never a 1011 close
            logger.exception("Frame on %s could not be handled", self.instance)
            await self.send_frame(frames.error(message=INTERNAL_ERROR, code="internal_error"))

    async def decode(self, raw: str | bytes) -> parse.InboundEvent:
        limit = {"max_bytes": conf.get("AGENT_MAX_FRAME_BYTES"),
                 "max_messages": conf.get("AGENT_MAX_MESSAGES_PER_REQUEST")}
        if len(raw) > OFF_LOOP_CHARS:
            return await sync_to_async(parse.parse, thread_sensitive=False)(raw, **limit)
        return parse.parse(raw, **limit)

    async def dispatch_event(self, event: parse.InboundEvent) -> None:
        instance = self.instance
        assert instance is not None
        if instance.pk is None and not isinstance(event, parse.ChatRequest):
            # No row when this socket connected: only what writes to the conversation makes it.
            # A probe is answered for the row a request has made since (a first message sent
            # just before a reconnect to another process), else as for an idle conversation.
            match event:
                case parse.ResumeRequest():
                    stored = await database_sync_to_async(registry.stored_since)(instance)
                    if stored is None:
                        await self.send_frame(frames.stream_resume_none(probe_id=event.probe_id))
                        return
                    await self.adopt(stored)
                case parse.ResumeAck() | parse.Cancel() | parse.Clear() | parse.Ignored():
                    return
                case _:
                    await self.adopt(await registry.amaterialize(instance))
            instance = self.instance
        match event:
            case parse.ChatRequest():
                # A first message makes the row with its admission; this connection follows the
                # conversation before the turn's first frame.
                await turns.submit_chat(instance, event, self.channel_name, self.scope.get("user"),
                                        joined=self.adopt)
            case parse.Cancel():
                await turns.cancel(instance, event.request_id)
            case parse.Clear():
                await turns.clear(instance, self.channel_name)
            case parse.ReplaceMessages():
                await turns.replace_messages(instance, event.messages, self.channel_name)
            case parse.ResumeRequest():
                await self.resume.request(event.probe_id)
            case parse.ResumeAck():
                await self.resume.ack(event.request_id)
            case parse.ToolResult():
                await turns.apply_tool_result(instance, event, self.channel_name)
            case parse.ToolApproval():
                await turns.apply_tool_approval(instance, event, self.channel_name)
            case parse.RpcCall():
                await self.send_frame(await rpc.answer(instance, self.scope.get("user"), event))
            case parse.Ignored():
                pass  # client state frames: this server keeps no client-writable state

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Relay fan-out batches, connect, handle frames and disconnect straight away.

        Channels closes stale DB connections (a thread hop) before every handler. The relay of a
        streamed batch touches no database, and it runs once per batch of every reply; a frame's
        handlers reach the database only through ``database_sync_to_async``, which closes them
        itself before and after each call (``channels.db``), and the hop was one more on the way
        to every turn's admission. ``connect`` reads the database first through ``registry.locate``
        on that same hop, before any hook of the agent's runs. ``disconnect`` reaches it only
        through such calls too (the ``on_close`` hook's), and Channels' ``websocket_disconnect``
        closes stale connections once more after it.
        """
        if message["type"] == fanout.EVENT_TYPE:
            await self.chat_frames(message)
        elif message["type"] == "websocket.receive":
            await self.websocket_receive(message)
        elif message["type"] == "websocket.connect":
            await self.websocket_connect(message)
        elif message["type"] == "websocket.disconnect":
            await self.websocket_disconnect(message)
        else:
            await super().dispatch(message)

    async def send_frame(self, frame: dict[str, Any]) -> None:
        await self.send(text_data=frames.encode(frame))

    async def send_text(self, text: str) -> None:
        await self.send(text_data=text)

    async def chat_frames(self, event: dict[str, Any]) -> None:
        """Relay a batch published by the turn engine (``streaming.fanout``)."""
        if self.resume is None or self.gone:
            return
        for item in decode_batch(event):
            if item.addressed_to(self.channel_name):
                await self.resume.deliver(item)

    async def stream_flushed(self, event: dict[str, Any]) -> None:
        """The turn's writer stored its chunks: the replay can go out (``agents_app.streaming.resume``)."""
        if self.resume is not None:
            await self.resume.on_message(event)

    async def stream_flush_check(self, event: dict[str, Any]) -> None:
        if self.resume is not None:
            await self.resume.on_message(event)


