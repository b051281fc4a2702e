"""What the model sees of an action call: error envelopes and size-capped, JSON-safe outputs.

Pure: no Django, no database, no event loop. An action never crashes its turn: whatever goes wrong
reaches the model as ``{"error": {"name", "message"}}`` (docs/architecture.md#error-envelopes), and
``prepare_output`` caps and cleans a successful output (docs/architecture.md#output-normalisation).
Rules of ``to_json_safe``, Python forms of the reference's: ints stay ints (one too long for
``str()`` becomes its ``hex()``); NaN and the infinities become ``None``; dates become ISO text,
enums their value, bytes UTF-8 text (``\\xNN`` escapes), dataclasses and pydantic models dicts,
tuples, deques and sets lists (sets sorted when comparable), other objects ``str()``; dict keys as
``json.dumps`` writes them; a container met twice (cycle or shared) becomes ``"[Circular]"``, which
keeps the work linear; lengths count code points, where JavaScript counts UTF-16 units.
"""

import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any, Final

from ..errors import (
    ActionAbortedError,
    ActionAuthorizationError,
    ActionError,
    ActionKeyConflict,
    ActionPendingError,
)

__all__ = [
    "ACTION_OUTPUT_MAX_CHARS",
    "CIRCULAR",
    "aborted_error",
    "authorization_error",
    "error_envelope",
    "key_conflict_error",
    "missing_permission_message",
    "pending_error",
    "prepare_output",
    "to_json_safe",
    "truncation_note",
]

# Largest action output the model reads, in characters (of a string, or of the output's JSON);
# beyond it the output is cut and labelled (the reference's ACTION_OUTPUT_MAX_CHARS).
ACTION_OUTPUT_MAX_CHARS: Final = 20_000

# What a repeated or circular reference becomes.
CIRCULAR: Final = "[Circular]"

# Ints longer than this many bits are checked against ``str()``'s digit limit before being kept.
_SAFE_INT_BITS: Final = 10_000


# --------------------------------------------------------------------------------------- envelopes
def error_envelope(exc: object) -> dict[str, Any]:
    """``{"error": {"name", "message"}}`` for anything that ended an action call (docs/architecture.md#error-envelopes).

    ``name``: an ``ActionError``'s reference name; ``"Error"`` for a bare ``Exception`` (Python's
    plain error, as JavaScript's is ``Error``) and for a non-exception value; otherwise the class
    name (``ValueError``). ``message``: ``str(exc)``, or ``repr(exc)`` when that is empty (the
    reference falls back to ``String(err)``). An ``ActionAuthorizationError`` adds the
    ``permissions`` the call required.
    """
    if not isinstance(exc, BaseException):
        return {"error": {"name": "Error", "message": str(exc)}}
    name = "Error" if type(exc) is Exception else type(exc).__name__
    if isinstance(exc, ActionError):
        name = exc.name
    error: dict[str, Any] = {"name": name, "message": str(exc) or repr(exc)}
    if isinstance(exc, ActionAuthorizationError):
        error["permissions"] = list(exc.permissions)
    return {"error": error}


def missing_permission_message(missing: Sequence[str]) -> str:
    """The default denial reason: ``Missing required permission: a, b``."""
    return ActionAuthorizationError.missing_message(missing)


def authorization_error(reason: str | None = None, permissions: Sequence[str] = ()) -> dict[str, Any]:
    """The ``ActionAuthorizationError`` envelope; ``reason`` defaults to ``Action is not authorized``."""
    return error_envelope(ActionAuthorizationError(reason, permissions=permissions))


def pending_error() -> dict[str, Any]:
    """The ``ActionPendingError`` envelope: a prior attempt is in an unknown state."""
    return error_envelope(ActionPendingError())


def key_conflict_error(ledger_key: str, action_name: str) -> dict[str, Any]:
    """The ``ActionKeyConflict`` envelope; ``ledger_key`` is the full key (``action:echo:k``)."""
    return error_envelope(ActionKeyConflict(ledger_key, action_name))


def aborted_error(reason: object = None) -> dict[str, Any]:
    """The envelope of an action cut short by its turn's cancellation.

    A reason that is an ``Exception`` is reported as itself; anything else (no reason, a string,
    an ``asyncio.CancelledError``, which is not an error of the action) as ``Action aborted``.
    """
    return error_envelope(reason if isinstance(reason, Exception) else ActionAbortedError())


# --------------------------------------------------------------------------------------- outputs
def truncation_note(dropped: int) -> str:
    """The label appended to a cut output: ``"\\n\\n[truncated <n> chars]"``."""
    return f"\n\n[truncated {dropped} chars]"


def prepare_output(value: Any) -> Any:
    """An action's return value as the model may read it (the reference's ``prepareActionOutputForModel``).

    * ``None`` (JavaScript's ``undefined`` and ``null`` alike) is returned as is.
    * A string of at most ``ACTION_OUTPUT_MAX_CHARS`` is returned unchanged; a longer one is cut
      to that many characters plus ``truncation_note``.
    * Anything else is normalised by ``to_json_safe``; if its compact JSON fits in the limit the
      normalised value is returned (a fresh copy: the transcript never aliases the action's own
      objects), else ``{"truncated": True, "chars": <JSON length>, "preview": <cut JSON text>}``.
    * If normalising fails (a ``__str__`` that raises, nesting too deep for the recursion limit)
      the result is ``{"serialized": False, "error": <message>}``: the model learns the action
      ran, and the turn goes on.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return _truncate(value)
    try:
        safe = to_json_safe(value)
        text = json.dumps(safe, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except Exception as exc:  # noqa: BLE001 (any failure of user code becomes a model-visible note)
        return {"serialized": False, "error": str(exc) or repr(exc)}
    if len(text) <= ACTION_OUTPUT_MAX_CHARS:
        return safe
    return {"truncated": True, "chars": len(text), "preview": _truncate(text)}


def _truncate(text: str) -> str:
    if len(text) <= ACTION_OUTPUT_MAX_CHARS:
        return text
    return text[:ACTION_OUTPUT_MAX_CHARS] + truncation_note(len(text) - ACTION_OUTPUT_MAX_CHARS)


def to_json_safe(value: Any) -> Any:
    """A fresh copy of ``value`` made only of dict/list/str/int/float/bool/None (rules: module doc).

    The result always passes ``json.dumps(..., allow_nan=False)``. Raises only what user code
    raises (an object's ``__str__``) or ``RecursionError`` for absurdly deep nesting.
    """
    # id → object: keeping each object referenced means no id is reused during the walk, even
    # for values a custom Mapping creates on the fly.
    return _convert(value, {})


def _convert(value: Any, seen: dict[int, Any]) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass (StrEnum, SafeString) as plain text
    if isinstance(value, int):
        return _int(int(value))
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return _convert(value.value, seen)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="backslashreplace")
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID | PurePath | complex):
        return str(value)
    if id(value) in seen:
        return CIRCULAR
    seen[id(value)] = value
    if isinstance(value, Mapping):
        return {_key(key): _convert(item, seen) for key, item in value.items()}
    if isinstance(value, list | tuple | deque):
        return [_convert(item, seen) for item in value]
    if isinstance(value, set | frozenset):
        return [_convert(item, seen) for item in _ordered(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _convert(getattr(value, field.name), seen) for field in dataclasses.fields(value)}
    model_dump_json = getattr(value, "model_dump_json", None)  # pydantic models
    if callable(model_dump_json) and not isinstance(value, type):
        try:
            return json.loads(model_dump_json())
        except (TypeError, ValueError):  # a field pydantic cannot serialise: fall back to the text
            pass
    return str(value)


def _int(number: int) -> int | str:
    if number.bit_length() > _SAFE_INT_BITS:
        try:
            str(number)
        except ValueError:  # beyond sys.get_int_max_str_digits(): json.dumps would refuse it too
            return hex(number)
    return number


def _key(key: Any) -> str:
    """A dict key as ``json.dumps`` writes it; keys JSON refuses (tuples, objects) by ``str()``."""
    if isinstance(key, str):
        return str.__str__(key)
    if isinstance(key, int) and not isinstance(key, bool):
        return str(_int(int(key)))
    if key is None or isinstance(key, bool | float):
        return json.dumps(key)
    return str(key)


def _ordered(items: set[Any] | frozenset[Any]) -> list[Any]:
    try:
        return sorted(items)
    except TypeError:  # mixed or unorderable items: keep iteration order
        return list(items)
