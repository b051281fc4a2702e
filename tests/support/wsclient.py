"""A real WebSocket client (the ``websockets`` package) for tests against a live server."""

import asyncio
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

RESP = "cf_agent_use_chat_response"


async def open_socket(ws_base: str, path: str, cookie: str | None) -> ClientConnection:
    headers = {"Origin": "http://localhost"}
    if cookie:
        headers["Cookie"] = cookie
    # A test that drops sockets on purpose must not wait out the default 10 s close handshake.
    return await connect(f"{ws_base}{path}", additional_headers=headers, max_size=None, close_timeout=1)


async def recv_json(sock: ClientConnection, timeout: float = 10) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(sock.recv(), timeout))


async def recv_until(sock: ClientConnection, predicate: Any, timeout: float = 10) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = await recv_json(sock, timeout)
        frames.append(frame)
        if predicate(frame):
            return frames
