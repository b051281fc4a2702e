"""JSON text of what every turn sends and stores: orjson where it can, the standard library where not.

orjson refuses lone surrogates, integers beyond 64 bits and keys that are not strings; for those
the standard library runs instead, so every value gives the text it gave before, and types
``json`` refuses stay refused. Two spellings differ: a float's exponent (``1e16``, not ``1e+16``)
and a non-number float, written ``null``. Reading stays with ``json`` (but for the client's
frames, ``protocol.parse``). Why and the measurements: docs/decisions.md#orjson-codec.
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
        return _standard(value)


def encoded(value: Any) -> bytes:
    """``dumps(value)`` in UTF-8, as orjson writes it (a size needs no text in between).

    Raises:
        TypeError, ValueError: as ``dumps`` does; UnicodeEncodeError for a lone surrogate.
    """
    try:
        return orjson.dumps(value, option=_PASSTHROUGH)
    except orjson.JSONEncodeError:
        return _standard(value).encode()


def embedded(text: str) -> Any:
    """JSON text that ``dumps`` and ``encoded`` write as it is, in place of a value: a stored
    message, which the database holds as valid JSON, sent on without being read and written again.
    orjson does not check the text, so it must be JSON; and a value holding one is not written by
    the standard library's fallback (``TypeError``), so it may hold nothing orjson refuses."""
    return orjson.Fragment(text)


def _standard(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

