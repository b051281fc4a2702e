"""JSON text of what every turn sends and stores: orjson where it can, the standard library where not.

Each turn encodes its frames (two of them the whole transcript), its chunks, and each message's
cache key (``llm.ui_messages``). Measured on a transcript of 60 messages: 72 µs with
``json.dumps``, 5 µs with orjson (bench/README.md, "Third round").

orjson is stricter than ``json``: it refuses lone surrogates, integers beyond 64 bits and keys
that are not strings. For those values the standard library runs instead, so every value gives
the text it gave before, and types ``json`` refuses stay refused (datetimes, dataclasses and
subclasses of the JSON types are handed back to it). Two outputs differ in spelling only: a
float's exponent (``1e16``, not ``1e+16``), and a float that is not a number, which orjson
writes as ``null`` where ``json`` wrote invalid JSON.

Reading stays with ``json``: orjson reads integers beyond 64 bits as floats, and telling when
it did costs more than it saves.
"""

import json
from typing import Any

import orjson

_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII characters as they are: ``json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)``.

    Raises:
        TypeError, ValueError: as ``json.dumps`` does for what JSON cannot hold.
    """
    try:
        return orjson.dumps(value, option=_PASSTHROUGH).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

