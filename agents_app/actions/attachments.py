"""Reply attachments: structured extras an action attaches to the turn's reply.

``ctx.attach_reply({"type": "email_draft", ...})`` hands a channel something to render beside the
text without changing what the model sees (docs/architecture.md#reply-attachments). Recording never
fails an action: a value that is not a mapping with a string ``type``, beyond the per-turn cap, or
not JSON-safe is ignored. A JSON-safe copy is stored, and ``items()`` hands out deep copies.
Attachments of an attempt that fails are discarded: ``attempt(action)`` rolls back exactly its own
entries, since pydantic-ai runs a step's tool calls concurrently. Policy callbacks and approved
durable-pause runs get ``NO_ATTACHMENTS``, whose ``record`` does nothing.
"""

import copy
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .. import events
from .envelopes import to_json_safe

__all__ = [
    "MAX_REPLY_ATTACHMENTS_PER_TURN",
    "NO_ATTACHMENTS",
    "AttachmentAttempt",
    "NullReplyAttachments",
    "ReplyAttachments",
]

# Attachments kept per turn; later ones are ignored, the first ones kept.
MAX_REPLY_ATTACHMENTS_PER_TURN: Final = 32


@dataclass(frozen=True)
class _Entry:
    # The attempt that recorded it (None: recorded directly on the recorder).
    owner: object | None
    value: dict[str, Any]


class ReplyAttachments:
    """The attachments of one turn, in recording order, capped at ``limit``.

    Thread-safe: a sync ``execute`` runs in a worker thread while async siblings record on the
    event loop.
    """

    def __init__(self, *, limit: int = MAX_REPLY_ATTACHMENTS_PER_TURN) -> None:
        self.limit = limit
        self._entries: list[_Entry] = []
        self._lock = threading.Lock()

    def record(self, value: object, action: str | None = None) -> bool:
        """Keep a JSON-safe copy of ``value`` and emit ``action:reply-attached``; False if ignored."""
        return self._record(value, action, owner=None)

    def _record(self, value: object, action: str | None, owner: object | None) -> bool:
        if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
            return False
        with self._lock:
            if len(self._entries) >= self.limit:
                return False
        try:
            safe = to_json_safe(value)
        except Exception:  # noqa: BLE001 (an attachment that cannot be serialised is dropped)
            return False
        with self._lock:  # checked again: another thread may have filled the last slot meanwhile
            if len(self._entries) >= self.limit:
                return False
            self._entries.append(_Entry(owner, safe))
        payload: dict[str, Any] = {"attachmentType": safe["type"]}
        if action is not None:
            payload = {"action": action, **payload}
        events.emit(events.REPLY_ATTACHED, **payload)
        return True

    def attempt(self, action: str | None = None) -> "AttachmentAttempt":
        """A recorder for one ``execute`` call of ``action``, whose entries it can roll back."""
        return AttachmentAttempt(self, action)

    def _discard(self, owner: object) -> None:
        with self._lock:
            self._entries = [entry for entry in self._entries if entry.owner is not owner]

    def items(self) -> list[dict[str, Any]]:
        """Deep copies of the kept attachments, in recording order."""
        with self._lock:
            values = [entry.value for entry in self._entries]
        return copy.deepcopy(values)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class AttachmentAttempt:
    """What one ``execute`` call records through: its ``record`` is that call's ``ctx.attach_reply``."""

    def __init__(self, recorder: ReplyAttachments, action: str | None) -> None:
        self._recorder = recorder
        self.action = action

    def record(self, value: object) -> bool:
        """Record ``value`` on the turn on behalf of this attempt; False if it was ignored."""
        return self._recorder._record(value, self.action, owner=self)

    def rollback(self) -> None:
        """Discard what this attempt recorded (it failed), leaving other calls' attachments alone."""
        self._recorder._discard(self)


class NullReplyAttachments:
    """A recorder that records nothing: for policy callbacks and approved durable-pause runs."""

    def record(self, value: object, action: str | None = None) -> bool:
        """Ignore ``value`` (``attach_reply`` is a no-op here)."""
        return False

    def attempt(self, action: str | None = None) -> "NullReplyAttachments":
        return self

    def rollback(self) -> None:
        """Nothing to discard."""

    def items(self) -> list[dict[str, Any]]:
        return []

    def __len__(self) -> int:
        return 0


# The shared no-op recorder (it holds no state).
NO_ATTACHMENTS: Final = NullReplyAttachments()
