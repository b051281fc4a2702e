"""The ceiling of this stack: a Channels consumer that only sends (``daphne bench.bare_asgi:application``).

Not part of the project's routing. Two WebSocket routes, both answering a
``cf_agent_use_chat_request`` whose body holds ``chunks`` (N) and ``frameBytes`` (S, mean bytes per frame) with
identity + MCP frames on connect, then N ``text-delta`` response frames of S bytes each (the
size of our real chunk frames, measured by ``bench/stream.py``) and a ``done`` frame:

``/bare/<room>``
    No channel layer: ``self.send`` straight to the socket. server + Channels + the WebSocket
    framing and nothing else.
``/layer/<room>``
    The frames take the path of ``agents_app.streaming.fanout``: group events of up to 64
    pre-encoded frames through the Redis channel layer, relayed by the consumer to its socket.
    server + Channels + Redis fan-out, without Django, the database or the model.
"""

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "thinkproject.settings")
django.setup()

from channels.generic.websocket import AsyncWebsocketConsumer  # noqa: E402 - needs settings
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

RESP = "cf_agent_use_chat_response"
# Frames per group event, as agents_app.streaming.fanout.MAX_BATCH.
BATCH = 64
MAX_CHUNKS = 100_000


def delta_frame(request_id: str, text_id: str, i: int) -> str:
    body = json.dumps({"type": "text-delta", "id": text_id, "delta": f"w{i} "}, separators=(",", ":"))
    return json.dumps({"body": body, "done": False, "id": request_id, "type": RESP, "seq": i},
                      separators=(",", ":"))


def frames_for(raw: str) -> Iterator[str]:
    """The frames that answer a chat request (deltas padded to frameBytes), made as they are sent."""
    request = json.loads(raw)
    request_id = str(request.get("id", "r"))
    body = json.loads(request.get("init", {}).get("body") or "{}")
    n = min(int(body.get("chunks", 200)), MAX_CHUNKS)
    target = int(body.get("frameBytes", 0))
    # Pad the text part id so that the mean frame size is the target (i appears twice per frame).
    mean_unpadded = len(delta_frame(request_id, "", 0)) + 2 * sum(len(str(i)) - 1 for i in range(n)) / max(n, 1)
    pad = max(1, round(target - mean_unpadded)) if target else 24
    text_id = ("t" * pad)[:pad]
    for i in range(n):
        yield delta_frame(request_id, text_id, i)
    yield json.dumps({"body": "", "done": True, "id": request_id, "type": RESP, "messageIds": []},
                     separators=(",", ":"))


HELLO = [
    json.dumps({"type": "cf_agent_identity", "name": "bare", "agent": "bare"}, separators=(",", ":")),
    json.dumps({"mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []},
                "type": "cf_agent_mcp_servers"}, separators=(",", ":")),
]


class BareConsumer(AsyncWebsocketConsumer):
    """Sends straight to its socket; no channel layer (an alias that is not configured)."""

    channel_layer_alias = "bench-no-layer"

    async def connect(self) -> None:
        await self.accept()
        for text in HELLO:
            await self.send(text_data=text)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        for text in frames_for(text_data or "{}"):
            await self.send(text_data=text)


class LayerConsumer(AsyncWebsocketConsumer):
    """Publishes to its own group through the Redis layer and relays the events, like ChatConsumer."""

    async def connect(self) -> None:
        self.group = f"bench.{uuid.uuid4().hex}"
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        for text in HELLO:
            await self.send(text_data=text)

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        items: list[dict[str, str]] = []
        for text in frames_for(text_data or "{}"):
            items.append({"text": text})
            if len(items) >= BATCH:
                await self.channel_layer.group_send(self.group, {"type": "chat.frames", "items": items})
                items = []
        if items:
            await self.channel_layer.group_send(self.group, {"type": "chat.frames", "items": items})

    async def chat_frames(self, event: dict[str, Any]) -> None:
        for entry in event["items"]:
            await self.send(text_data=entry["text"])


application = ProtocolTypeRouter({
    "websocket": URLRouter([
        re_path(r"^bare/[^/]+/?$", BareConsumer.as_asgi()),
        re_path(r"^layer/[^/]+/?$", LayerConsumer.as_asgi()),
    ]),
})
