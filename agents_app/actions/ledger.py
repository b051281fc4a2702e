"""The action idempotency ledger: run an action's side effect at most once per key.

A call claims its key with a ``pending`` ``LedgerEntry``, runs, then *settles* the row with its
JSON result, which later calls replay; a call that fails *releases* (deletes) it. A row left
``pending`` by a dead process is refused (``ActionPendingError``) until the retry lease passes and
only for an explicit key, then exactly one caller *reclaims* it. Every race is one SQL statement
(docs/architecture.md#one-statement-per-race); the rest is in docs/architecture.md#ledger. Each
agent instance has its own ledger, so an explicit key means "once in this conversation". The
``action()`` pipeline calls ``run_once``; ``claim``/``settle``/``release`` are its parts, sync
because they need ``transaction.atomic()``.
"""

import asyncio
import contextlib
import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import logging
import math
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import PurePath
from typing import Any, Final, Literal, TypeAlias

from channels.db import database_sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.utils import timezone

from .. import conf, events
from ..errors import EMPTY_KEY_MESSAGE, PENDING_MESSAGE, ActionKeyConflict, ActionPendingError
from ..models import LedgerEntry

__all__ = [
    "DEFAULT_PENDING_RETRY_LEASE",
    "DEFAULT_PENDING_TTL",
    "DEFAULT_SETTLED_TTL",
    "DEFAULT_SWEEP_BATCH_SIZE",
    "USE_SETTING",
    "Claim",
    "LedgerResult",
    "Retention",
    "claim",
    "conflict_message",
    "empty_key_message",
    "input_hash",
    "lease_of",
    "ledger_key",
    "pending_retry_lease",
    "release",
    "retention",
    "run_once",
    "settle",
    "sweep_expired",
]

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------- defaults
# The values live in conf.DEFAULTS (one documented block for every AGENT_* setting); these names
# are what code and tests refer to (docs/architecture.md#action-defaults).

# A pending explicit-key row older than this may be reclaimed (5 minutes, as the reference's 300_000 ms).
DEFAULT_PENDING_RETRY_LEASE: Final[timedelta] = conf.DEFAULTS["AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE"]
# Settled rows are replayable for 30 days after they settled (the reference's settledMs 2_592_000_000).
DEFAULT_SETTLED_TTL: Final[timedelta] = conf.DEFAULTS["AGENT_ACTION_LEDGER_RETENTION"]["settled"]
# Pending rows, kept for manual reconciliation, go after 90 days (the reference's pendingMs 7_776_000_000).
DEFAULT_PENDING_TTL: Final[timedelta] = conf.DEFAULTS["AGENT_ACTION_LEDGER_RETENTION"]["pending"]
# Rows deleted per statement by the sweep, so it never holds a long lock. (The reference's maxSweepRows
# caps a whole sweep at 500; ours goes on in batches until nothing expired is left.)
DEFAULT_SWEEP_BATCH_SIZE: Final[int] = conf.DEFAULTS["AGENT_ACTION_LEDGER_RETENTION"]["batch_size"]

# Rounds of "INSERT lost → read → the row changed under us" before claim() gives up and answers
# "pending" (never "run"): each round means another process made progress on the key, so this
# is only reached under pathological churn, and refusing is the safe answer.
MAX_CLAIM_ROUNDS = 8


class _Setting(enum.Enum):
    USE = "use the AGENT_* setting"


# Default of parameters that fall back to their AGENT_* setting, read at call time.
USE_SETTING: Final = _Setting.USE
# The type of such a parameter's default, for annotations elsewhere.
UseSetting: TypeAlias = Literal[_Setting.USE]

# --------------------------------------------------------------------------------------- messages
# Model-visible error names and messages, the reference's exact strings, live with the exceptions
# in ``errors`` (one copy).
def conflict_message(ledger_key: str, action_name: str) -> str:
    """The ``ActionKeyConflict`` message; ``ledger_key`` is the full key (``action:echo:k``)."""
    return str(ActionKeyConflict(ledger_key, action_name))


def empty_key_message(action_name: str) -> str:
    """Message of the error raised when an idempotency-key function returns ``""``."""
    return EMPTY_KEY_MESSAGE.format(name=action_name)


# --------------------------------------------------------------------------------------- settings
@dataclass(frozen=True, kw_only=True)
class Retention:
    """How long ledger rows are kept (``AGENT_ACTION_LEDGER_RETENTION``); None keeps them forever."""

    settled: timedelta | None = DEFAULT_SETTLED_TTL
    pending: timedelta | None = DEFAULT_PENDING_TTL
    batch_size: int = DEFAULT_SWEEP_BATCH_SIZE


def pending_retry_lease() -> timedelta | None:
    """``AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE``: None means pending rows are never reclaimed."""
    lease = conf.get("AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE")
    if lease is not None and not isinstance(lease, timedelta):
        raise ImproperlyConfigured("AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE must be a timedelta or None.")
    return lease


def lease_of(agent: object) -> timedelta | None:
    """The pending-retry lease of ``agent``'s class: its ``action_ledger_pending_retry_lease``.

    The class attribute defaults to ``USE_SETTING``, which reads the global setting; a class may
    set its own timedelta, or None to never reclaim (docs/architecture.md#ledger).
    """
    lease = getattr(type(agent), "action_ledger_pending_retry_lease", USE_SETTING)
    if lease is USE_SETTING:
        return pending_retry_lease()
    if lease is not None and not isinstance(lease, timedelta):
        raise ImproperlyConfigured(
            f"{type(agent).__qualname__}.action_ledger_pending_retry_lease must be a timedelta or None."
        )
    return lease


def retention() -> Retention:
    """``AGENT_ACTION_LEDGER_RETENTION`` merged over its defaults (a partial dict is allowed)."""
    raw = conf.get("AGENT_ACTION_LEDGER_RETENTION")
    unknown = set(raw) - {"settled", "pending", "batch_size"}
    if unknown:
        raise ImproperlyConfigured(f"AGENT_ACTION_LEDGER_RETENTION has unknown keys: {sorted(unknown)}.")
    merged = Retention(**raw)
    for ttl in (merged.settled, merged.pending):
        if ttl is not None and not isinstance(ttl, timedelta):
            raise ImproperlyConfigured("AGENT_ACTION_LEDGER_RETENTION ttls must be timedeltas or None.")
    if not isinstance(merged.batch_size, int) or merged.batch_size < 1:
        raise ImproperlyConfigured("AGENT_ACTION_LEDGER_RETENTION batch_size must be a positive int.")
    return merged


# --------------------------------------------------------------------------------------- keys and hashes
def ledger_key(action_name: str, explicit_key: str | None, tool_call_id: str | None) -> str | None:
    """The row key of a call: ``action:<name>:<key>``, else ``tool:<toolCallId>``, else None (no ledger).

    An explicit key of ``""`` is a bug in the action's ``idempotency_key`` function, so it raises
    ``ValueError`` instead of silently falling back to the tool-call key.
    """
    if explicit_key is not None:
        if explicit_key == "":
            raise ValueError(empty_key_message(action_name))
        return f"action:{action_name}:{explicit_key}"
    if tool_call_id:
        return f"tool:{tool_call_id}"
    return None


# Marks an object that JSON has no type for; a NUL-prefixed key cannot come from a model's
# tool-call arguments in practice, so tagged values do not collide with plain dicts.
_TAG = "\u0000type"
# Integers beyond 64 bits are hashed in hex: int → decimal text has a length limit
# (sys.get_int_max_str_digits) and hex does not, so any size works.
_PLAIN_INT_LIMIT = 1 << 63


def input_hash(value: Any) -> str:
    """sha256 (hex) of the canonical JSON of an action input; equal inputs give equal hashes.

    Canonical form: dict keys as strings, sorted at every level; tuples as lists; a float with an
    integral value as that int (``1.0`` and ``1`` are the same JSON number, as in JavaScript);
    ints of any size. Values JSON has no type for are hashed through a tagged stand-in:
    bytes (hex), sets (sorted), Decimal/UUID/date/time/datetime/paths (their text), enums (their
    value), dataclasses and pydantic models (their fields), other objects (their ``__dict__``,
    else ``repr()``, which is only as stable as the type makes it). A container met again inside
    itself becomes ``"[Circular]"``. Only equality matters: the digest is never parsed.
    """
    text = json.dumps(_canonical(value, frozenset()), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _canonical(value: Any, path: frozenset[int]) -> Any:
    if isinstance(value, str):
        return str.__str__(value)  # a str subclass (StrEnum, TextChoices) hashes as its text
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        number = int(value)
        return number if -_PLAIN_INT_LIMIT < number < _PLAIN_INT_LIMIT else {_TAG: "int", "hex": format(number, "x")}
    if isinstance(value, float):
        return _canonical(int(value), path) if value.is_integer() else value
    if isinstance(value, enum.Enum):
        return {_TAG: "enum", "value": _canonical(value.value, path)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {_TAG: "bytes", "hex": bytes(value).hex()}
    if isinstance(value, decimal.Decimal | uuid.UUID | PurePath):
        return {_TAG: type(value).__name__, "text": str(value)}
    if isinstance(value, dt.date | dt.time):  # datetime is a date
        return {_TAG: type(value).__name__, "iso": value.isoformat()}
    if id(value) in path:
        return "[Circular]"
    inner = path | {id(value)}
    if isinstance(value, Mapping):
        return {_key_text(k): _canonical(v, inner) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item, inner) for item in value]
    if isinstance(value, set | frozenset):
        items = [_canonical(item, inner) for item in value]
        return {_TAG: "set", "items": sorted(items, key=lambda item: json.dumps(item, sort_keys=True))}
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if dataclasses.is_dataclass(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {_TAG: kind, "fields": _canonical(fields, inner)}
    model_dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(model_dump):
        return {_TAG: kind, "fields": _canonical(model_dump(), inner)}
    if type(value).__repr__ is object.__repr__ and hasattr(value, "__dict__"):
        return {_TAG: kind, "fields": _canonical(vars(value), inner)}
    return {_TAG: kind, "repr": repr(value)}


def _key_text(key: Any) -> str:
    """A dict key as JSON makes it (``1`` → ``"1"``, ``True`` → ``"true"``); others by their canonical JSON."""
    if isinstance(key, str):
        return str.__str__(key)
    if key is None or isinstance(key, bool | int | float):
        return json.dumps(_canonical(key, frozenset()))
    return json.dumps(_canonical(key, frozenset()), sort_keys=True)


# --------------------------------------------------------------------------------------- results
def _encode_result(value: Any) -> str:
    """``{"valuePresent", "value"}`` as JSON; raises if ``value`` has no faithful JSON form.

    Python's None plays JavaScript's ``undefined`` (``valuePresent: false``). NaN and infinities
    are refused (``allow_nan=False``) rather than stored as non-JSON tokens.
    """
    return json.dumps({"valuePresent": value is not None, "value": value}, allow_nan=False)


def _decode_result(text: str | None) -> Any:
    if not text:
        return None
    try:
        stored = json.loads(text)
    except ValueError:
        logger.warning("unreadable ledger result %.200r; replaying None", text)
        return None
    return stored.get("value") if isinstance(stored, dict) and stored.get("valuePresent") is True else None


# --------------------------------------------------------------------------------------- claim
ClaimOutcome = Literal["claimed", "replayed", "conflict", "pending", "reclaimed"]


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What ``claim()`` decided for a key.

    ``claimed``/``reclaimed``: the caller must run the side effect, then ``settle`` or
    ``release`` with ``claimed_at``. ``replayed``: ``value`` is the stored result. ``conflict``:
    the key was used by another action or input. ``pending``: an attempt in an unknown state
    holds the key.
    """

    key: str
    outcome: ClaimOutcome
    # The stored result (``replayed`` only).
    value: Any = None
    # Age of the pending row that was reclaimed or refused, in milliseconds.
    age_ms: int | None = None
    # The row's ``updated_at`` as this claim wrote it: the token settle/release match on.
    claimed_at: datetime | None = None

    @property
    def must_execute(self) -> bool:
        return self.outcome in ("claimed", "reclaimed")


def _ms(age: timedelta) -> int:
    return math.floor(age.total_seconds() * 1000)


def claim(
    key: str,
    *,
    scope: str = "",
    action_name: str,
    input_hash: str,
    request_id: str = "",
    tool_call_id: str = "",
    retryable: bool,
    lease: timedelta | UseSetting | None = USE_SETTING,
    now: datetime | None = None,
) -> Claim:
    """Claim ``key`` for one execution, or say why not, in the order of docs/architecture.md#ledger.

    ``scope``: whose ledger (the pipeline passes the agent instance: each conversation has its
    own ledger, as each Cloudflare agent instance has its own table). ``retryable``: the action
    declared an explicit idempotency key, so a stale pending row may be re-run; fallback
    ``tool:`` keys never are. ``lease``: how old (strictly older) a pending row must be to be
    stale; None disables reclaiming; default the setting.

    The INSERT comes first and the unique constraint decides; only a loser reads the row. A
    reclaim is ``UPDATE … WHERE status='pending' AND updated_at=<what we read>``, so of several
    processes that all found the same stale row exactly one gets rowcount 1.
    """
    now = now or timezone.now()
    if lease is USE_SETTING:
        lease = pending_retry_lease()
    for _ in range(MAX_CLAIM_ROUNDS):
        try:
            with transaction.atomic():
                LedgerEntry.objects.create(
                    scope=scope, key=key, action_name=action_name, input_hash=input_hash, request_id=request_id or "",
                    tool_call_id=tool_call_id or "", status=LedgerEntry.Status.PENDING, result_json="",
                    created_at=now, updated_at=now,
                )
        except IntegrityError:
            pass  # another call holds the key: decide on its row below
        else:
            return Claim(key=key, outcome="claimed", claimed_at=now)
        entry = LedgerEntry.objects.filter(scope=scope, key=key).first()
        if entry is None:
            continue  # released between our INSERT and this read: the key is free again
        if entry.action_name != action_name or entry.input_hash != input_hash:
            return Claim(key=key, outcome="conflict")
        if entry.status == LedgerEntry.Status.SETTLED:
            return Claim(key=key, outcome="replayed", value=_decode_result(entry.result_json))
        age = now - entry.updated_at
        if not (retryable and lease is not None and age > lease):
            return Claim(key=key, outcome="pending", age_ms=_ms(age))
        reclaimed = LedgerEntry.objects.filter(
            pk=entry.pk, status=LedgerEntry.Status.PENDING, updated_at=entry.updated_at,
        ).update(request_id=request_id or "", tool_call_id=tool_call_id or "", updated_at=now)
        if reclaimed:
            return Claim(key=key, outcome="reclaimed", age_ms=_ms(age), claimed_at=now)
        # Another process reclaimed, settled or released the row first: decide again.
    logger.warning("ledger key %s kept changing during %d claim rounds; answering pending", key, MAX_CLAIM_ROUNDS)
    return Claim(key=key, outcome="pending")


def _held(key: str, scope: str, claimed_at: datetime | None) -> Any:
    """The pending row of ``key``, and only if it still carries our claim (when we know it)."""
    rows = LedgerEntry.objects.filter(scope=scope, key=key, status=LedgerEntry.Status.PENDING)
    return rows if claimed_at is None else rows.filter(updated_at=claimed_at)


def settle(key: str, value: Any, *, scope: str = "", claimed_at: datetime | None = None,
           now: datetime | None = None) -> tuple[bool, Any]:
    """Store ``value`` as the result of ``key``; returns ``(True, JSON round trip of value)``.

    A value with no faithful JSON form (an object, a set, NaN…) cannot be replayed, so the row is
    released instead and ``(False, value)`` is returned: the caller still gets the live value,
    un-ledgered. With ``claimed_at`` (from the ``Claim``), a row that another
    process reclaimed meanwhile is left to that process; the value is returned either way.
    """
    try:
        text = _encode_result(value)
    except (TypeError, ValueError, RecursionError):
        release(key, scope=scope, claimed_at=claimed_at)
        return False, value
    updated = _held(key, scope, claimed_at).update(
        status=LedgerEntry.Status.SETTLED, result_json=text, updated_at=now or timezone.now(),
    )
    if not updated:
        logger.warning("ledger row %s was reclaimed or removed while its execution ran; result not recorded", key)
    return True, _decode_result(text)


def release(key: str, *, scope: str = "", claimed_at: datetime | None = None) -> bool:
    """Delete the pending row of a failed, timed-out or aborted execution, so a retry can run.

    Settled rows are never released. Returns whether a row was deleted.
    """
    deleted, _ = _held(key, scope, claimed_at).delete()
    return deleted > 0


def recorded_call(scope: str, tool_call_id: str) -> Claim | None:
    """What the ledger knows of one tool call: ``replayed`` with its stored result, ``pending``
    (an execution in an unknown state), or None when the call never claimed a row.

    Recovery asks this of calls a crash cut (``recovery.service``): a settled side effect is
    replayed and a pending one is reported, never run again blindly.
    """
    entry = LedgerEntry.objects.filter(scope=scope, tool_call_id=tool_call_id).order_by("-updated_at").first()
    if entry is None:
        return None
    if entry.status == LedgerEntry.Status.SETTLED:
        return Claim(key=entry.key, outcome="replayed", value=_decode_result(entry.result_json))
    return Claim(key=entry.key, outcome="pending", claimed_at=entry.updated_at)


# --------------------------------------------------------------------------------------- sweep
def sweep_expired(
    *,
    now: datetime | None = None,
    settled_ttl: timedelta | UseSetting | None = USE_SETTING,
    pending_ttl: timedelta | UseSetting | None = USE_SETTING,
    batch_size: int | UseSetting = USE_SETTING,
) -> dict[str, int]:
    """Delete settled rows older than ``settled_ttl`` and pending ones older than ``pending_ttl``.

    Returns ``{"settled": n, "pending": m}`` and emits ``action:ledger:swept`` with it. Oldest
    first, ``batch_size`` rows per DELETE (never a long lock), until none is left; a ttl of None
    skips that status. Defaults come from ``AGENT_ACTION_LEDGER_RETENTION``. Each DELETE repeats
    the age condition, so a row reclaimed or settled between the SELECT and the DELETE stays.
    """
    now = now or timezone.now()
    policy = retention()
    settled_ttl = policy.settled if settled_ttl is USE_SETTING else settled_ttl
    pending_ttl = policy.pending if pending_ttl is USE_SETTING else pending_ttl
    batch = policy.batch_size if batch_size is USE_SETTING else batch_size
    if batch < 1:
        raise ValueError("batch_size must be at least 1")
    counts = {
        "settled": _sweep(LedgerEntry.Status.SETTLED, now, settled_ttl, batch),
        "pending": _sweep(LedgerEntry.Status.PENDING, now, pending_ttl, batch),
    }
    events.emit(events.LEDGER_SWEPT, **counts)
    return counts


def _sweep(status: str, now: datetime, ttl: timedelta | None, batch_size: int) -> int:
    if ttl is None:
        return 0
    expired = LedgerEntry.objects.filter(status=status, updated_at__lt=now - ttl)
    deleted = 0
    while True:
        ids = list(expired.order_by("updated_at", "pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return deleted
        deleted += expired.filter(pk__in=ids).delete()[0]
        if len(ids) < batch_size:
            return deleted


# --------------------------------------------------------------------------------------- run_once
LedgerOutcome = Literal["claimed", "replayed", "conflict", "pending", "reclaimed", "unledgered"]


@dataclass(frozen=True, kw_only=True)
class LedgerResult:
    """The outcome of ``run_once``: the value to hand on, or why there is none.

    ``conflict`` and ``pending`` are returned rather than raised: the action pipeline turns them
    into the model-visible envelopes (``error_name``/``error_message``). ``unledgered``: there
    was no key (no idempotency key and no tool call id), so ``execute`` just ran.
    """

    key: str | None
    action_name: str
    outcome: LedgerOutcome
    # The JSON round trip of what execute returned (or the stored one, on a replay); the live
    # value itself when it could not be stored.
    value: Any = None
    # Whether this call's own ``execute`` ran.
    executed: bool = False
    # Whether ``value`` is stored in the ledger (replays will return it).
    recorded: bool = False
    # This call awaited a concurrent call with the same key in this event loop and shares its result.
    coalesced: bool = False
    # Age of the pending row that was refused or reclaimed, in milliseconds.
    age_ms: int | None = None

    @property
    def error_name(self) -> str | None:
        """``ActionKeyConflict`` / ``ActionPendingError`` when no value is available, else None."""
        return {"conflict": ActionKeyConflict.name, "pending": ActionPendingError.name}.get(self.outcome)

    @property
    def error_message(self) -> str | None:
        if self.outcome == "conflict":
            return conflict_message(self.key or "", self.action_name)
        if self.outcome == "pending":
            return PENDING_MESSAGE
        return None


# Same-loop coalescing: event loop → key → the future of the call that runs it. Per loop because
# a future can only be awaited on its own loop (Celery tasks each run a fresh one).
_Flights: TypeAlias = dict[tuple[str, str], "asyncio.Future[LedgerResult]"]
_in_flight: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Flights]" = (
    weakref.WeakKeyDictionary()
)


async def run_once(
    key: str | None,
    *,
    scope: str = "",
    action_name: str,
    input_hash: str,
    request_id: str = "",
    tool_call_id: str = "",
    retryable: bool,
    lease: timedelta | UseSetting | None = USE_SETTING,
    execute: Callable[[], Awaitable[Any]],
    now: datetime | None = None,
) -> LedgerResult:
    """Run ``execute`` at most once for ``key``, replaying its stored result afterwards.

    Order: coalesce with a call already running this key in this loop → claim → on
    ``claimed``/``reclaimed`` run ``execute`` and settle its result, or release the row and
    re-raise if it raises (including cancellation and timeouts). Emits the reference's
    ``action:ledger:*`` events. A follower of a call that raised gets the same exception; a
    follower of a call that was cancelled starts over on its own (it was not cancelled itself).
    As in the reference, a follower's input is not compared with the leader's: a same-key call
    with other input that arrives while the first runs gets the first's result, not a conflict.

    If ``settle`` itself fails (database down) the row stays ``pending``: the side effect did
    happen, so refusing retries until someone reconciles is the safe state.
    """
    if key is None:
        return LedgerResult(key=None, action_name=action_name, outcome="unledgered",
                            value=await execute(), executed=True)
    loop = asyncio.get_running_loop()
    flights = _in_flight.setdefault(loop, {})
    flight = (scope, key)
    while (leader := flights.get(flight)) is not None:
        try:
            # shield: our own cancellation must not cancel the leader's future.
            shared = await asyncio.shield(leader)
        except asyncio.CancelledError:
            if leader.cancelled():
                continue
            raise
        return dataclasses.replace(shared, executed=False, coalesced=True)
    future: asyncio.Future[LedgerResult] = loop.create_future()
    flights[flight] = future
    try:
        result = await _claim_and_run(
            key, scope=scope, action_name=action_name, input_hash=input_hash, request_id=request_id,
            tool_call_id=tool_call_id, retryable=retryable, lease=lease, execute=execute, now=now,
        )
    except asyncio.CancelledError:
        future.cancel()
        raise
    except BaseException as exc:
        future.set_exception(exc)
        future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
        raise
    else:
        future.set_result(result)
        return result
    finally:
        if flights.get(flight) is future:
            del flights[flight]


async def _claim_and_run(
    key: str,
    *,
    scope: str,
    action_name: str,
    input_hash: str,
    request_id: str,
    tool_call_id: str,
    retryable: bool,
    lease: timedelta | UseSetting | None,
    execute: Callable[[], Awaitable[Any]],
    now: datetime | None,
) -> LedgerResult:
    claiming = asyncio.ensure_future(database_sync_to_async(claim)(
        key, scope=scope, action_name=action_name, input_hash=input_hash, request_id=request_id,
        tool_call_id=tool_call_id, retryable=retryable, lease=lease, now=now,
    ))
    try:
        decided = await asyncio.shield(claiming)
    except asyncio.CancelledError:
        # claim() goes on in its thread and may still insert our row: wait for it and undo that,
        # or the key would stay pending, refusing retries, with nothing running it. A failure
        # here must not hide the cancellation from the caller.
        with contextlib.suppress(Exception):
            decided = await asyncio.shield(claiming)
            if decided.must_execute:
                await asyncio.shield(database_sync_to_async(release)(key, scope=scope, claimed_at=decided.claimed_at))
        raise
    about = {"action": action_name, "key": key, "inputHash": input_hash}
    result = LedgerResult(key=key, action_name=action_name, outcome=decided.outcome, age_ms=decided.age_ms)
    if decided.outcome == "conflict":
        events.emit(events.LEDGER_CONFLICT, **about)
        return result
    if decided.outcome == "pending":
        events.emit(events.LEDGER_PENDING, **about)
        return result
    if decided.outcome == "replayed":
        events.emit(events.LEDGER_REPLAYED, **about)
        return dataclasses.replace(result, value=decided.value, recorded=True)
    if decided.outcome == "reclaimed":
        events.emit(events.LEDGER_RECLAIMED, **about, ageMs=decided.age_ms)
    try:
        value = await execute()
    except BaseException:
        # shield: a second cancellation while releasing must not leave the row pending.
        await asyncio.shield(database_sync_to_async(release)(key, scope=scope, claimed_at=decided.claimed_at))
        raise
    recorded, value = await database_sync_to_async(settle)(key, value, scope=scope, claimed_at=decided.claimed_at)
    if recorded:
        events.emit(events.LEDGER_SETTLED, **about)
    else:
        events.emit(events.LEDGER_SERIALIZE_FAILED, action=action_name, key=key)
    return dataclasses.replace(result, value=value, executed=True, recorded=recorded)
