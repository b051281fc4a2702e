"""A channel layer that loses group messages on purpose, as a full channel on Redis would.

``group_send`` drops a message for a channel whose queue is full (Channels' groups are lossy by
design). This in-memory layer drops the ``chat.frames`` events a test chooses, for the channels
it chooses, so the test can show that a connection re-sends what it lost from the stream buffer.
"""

from collections.abc import Callable
from typing import Any, ClassVar

from channels.layers import InMemoryChannelLayer

# (n, message) → lose it? ``n`` counts the chat.frames events addressed to the channel, from 1.
DropRule = Callable[[int, dict[str, Any]], bool]


class LossyChannelLayer(InMemoryChannelLayer):
    # Filled in by the test (``reset()`` empties them).
    rules: ClassVar[dict[str, DropRule]] = {}
    # Channels in the order they joined a group; chat.frames events seen and lost per channel.
    joined: ClassVar[list[str]] = []
    seen: ClassVar[dict[str, int]] = {}
    lost: ClassVar[dict[str, list[dict[str, Any]]]] = {}

    @classmethod
    def reset(cls) -> None:
        cls.rules, cls.joined, cls.seen, cls.lost = {}, [], {}, {}

    async def group_add(self, group: str, channel: str) -> None:
        self.joined.append(channel)
        await super().group_add(group, channel)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if message.get("type") != "chat.frames":
            await super().group_send(group, message)
            return
        for channel in list(self.groups.get(group, {})):
            n = self.seen[channel] = self.seen.get(channel, 0) + 1
            rule = self.rules.get(channel)
            if rule is not None and rule(n, message):
                self.lost.setdefault(channel, []).append(message)
            else:
                await self.send(channel, message)


def carries(message: dict[str, Any], text: str) -> bool:
    """Whether a chat.frames event carries a frame containing ``text``."""
    return any(text in item.get("text", "") for item in message["items"])
