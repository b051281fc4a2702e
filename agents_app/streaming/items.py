"""What the fan-out carries: one typed ``Item`` per frame or handshake event (pure, no Django).

A publisher encodes each item once (``Item.encode``, short keys for the channel layer's msgpack)
and every connection decodes it once (``Item.decode``). Live chunks carry their index (``seq``)
and a stream's terminal frame the index of its last chunk (``last_seq``): channel-layer groups
drop messages when a channel is full, and these numbers are how a receiver notices.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..protocol.frames import Frame, encode


class Event(StrEnum):
    """Items for the connections' resume handshake, sent as no frame."""

    # A turn's stream begins (``request_id``): a connection told "a turn is coming" resumes it.
    STREAM_START = "stream-start"
    # The queue ran dry after turn ``turn``: a connection parked on it learns nothing is coming.
    TURNS_IDLE = "turns-idle"


@dataclass(slots=True, kw_only=True)
class Item:
    """One entry of a fan-out batch: an encoded frame for the sockets, or a handshake event.

    The frame is encoded once by the publisher, not once per connection. ``only`` and
    ``exclude`` address it (channel names); ``request_id`` marks the live frames of one reply
    (a connection waiting for its resume ACK skips its chunks; its final transcript and terminal
    frame end that wait), ``seq`` a live chunk's index and ``last_seq`` the last chunk index of
    the stream a terminal frame ends (-1: it had none).

    Read-only by convention, not ``frozen``: every connection makes one per streamed chunk, and a
    frozen dataclass's ``__init__`` costs three times as much (1.8 against 0.6 µs).
    """

    text: str | None = None
    event: Event | None = None
    request_id: str | None = None
    seq: int | None = None
    last_seq: int | None = None
    # TURNS_IDLE: the newest turn of the instance when the queue ran dry.
    turn: int = 0
    lead: str | None = None
    only: str | None = None
    exclude: tuple[str, ...] = ()

    @classmethod
    def frame(cls, frame: Frame, *, exclude: Iterable[str] = (), only: str | None = None,
              request_id: str | None = None, last_seq: int | None = None, lead: str | None = None) -> "Item":
        """The item of an outbound frame; a live (not replayed) chunk keeps its ``seq``."""
        return cls.decode(cls.frame_entry(frame, exclude=exclude, only=only, request_id=request_id,
                                          last_seq=last_seq, lead=lead))

    @staticmethod
    def frame_entry(frame: Frame, *, exclude: Iterable[str] = (), only: str | None = None,
                    request_id: str | None = None, last_seq: int | None = None,
                    lead: str | None = None) -> dict[str, Any]:
        """``Item.frame(...).encode()`` without making the item: what a publisher queues for each
        streamed chunk (one object fewer per chunk)."""
        data: dict[str, Any] = {"text": encode(frame)}
        if request_id is not None:
            data["rid"] = request_id
        if "seq" in frame and not frame.get("replay"):
            data["seq"] = frame["seq"]
        if last_seq is not None:
            data["last"] = last_seq
        if lead is not None:
            data["lead"] = lead
        if only:
            data["only"] = only
        excluded = [channel for channel in exclude if channel]
        if excluded:
            data["exclude"] = excluded
        return data

    def addressed_to(self, channel: str) -> bool:
        return (self.only is None or self.only == channel) and channel not in self.exclude

    def encode(self) -> dict[str, Any]:
        """The item as the channel layer carries it (msgpack): short keys, defaults left out."""
        data: dict[str, Any] = {}
        for key, value in (("text", self.text), ("event", self.event), ("rid", self.request_id),
                           ("seq", self.seq), ("last", self.last_seq), ("lead", self.lead), ("only", self.only)):
            if value is not None:
                data[key] = str(value) if key == "event" else value
        if self.turn:
            data["turn"] = self.turn
        if self.exclude:
            data["exclude"] = list(self.exclude)
        return data

    @classmethod
    def decode(cls, data: dict[str, Any]) -> "Item":
        event = data.get("event")
        return cls(
            text=data.get("text"), event=Event(event) if event is not None else None, request_id=data.get("rid"),
            seq=data.get("seq"), last_seq=data.get("last"), turn=data.get("turn", 0), lead=data.get("lead"),
            only=data.get("only"),
            exclude=tuple(data.get("exclude", ())),
        )


def decode_batch(message: dict[str, Any]) -> list[Item]:
    """The items of a ``chat.frames`` group event."""
    return [Item.decode(entry) for entry in message["items"]]
