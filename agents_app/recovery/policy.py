"""Durable chat recovery: the budget of an interrupted turn, and what its hooks are told.

A turn cut by a crash or by the stall watchdog opens a recovery *incident*: a recovery turn
re-runs the unanswered request (*retry*) or goes on with the partial reply (*continue*), as often
as the budget allows. This is the pure part (no Django): ``ChatRecovery`` with the reference's
defaults and normalisation (docs/architecture.md#recovery-budget), the decision for each attempt,
and the contexts handed to ``on_chat_recovery``, ``should_keep_recovering`` and ``on_exhausted``.
``agents_app.recovery.service`` keeps the incidents and runs the attempts. Durations are in seconds
(the reference's ``*Ms`` fields divided by 1,000).
"""

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

TERMINAL_MESSAGE = "The assistant was interrupted and could not recover. Please try again."


class Kind(StrEnum):
    """How an attempt goes on: the request had no reply yet, or a partial one."""

    RETRY = "retry"
    CONTINUE = "continue"


class Reason(StrEnum):
    """Why an incident was given up (the reference's ``ChatRecoveryExhaustedContext.reason``)."""

    MAX_ATTEMPTS = "max_attempts_exceeded"
    NO_PROGRESS = "no_progress_timeout"
    WORK_BUDGET = "work_budget_exceeded"
    ABORTED = "recovery_aborted"
    OUT_OF_MEMORY = "out_of_memory"


class Status(StrEnum):
    """Where an incident stands (the reference's incident status values)."""

    DETECTED = "detected"
    SCHEDULED = "scheduled"
    ATTEMPTING = "attempting"
    COMPLETED = "completed"
    SKIPPED = "skipped"
    EXHAUSTED = "exhausted"
    FAILED = "failed"


# Incidents still being worked on: clients are told the conversation is recovering.
OPEN_STATUSES = (Status.DETECTED, Status.SCHEDULED, Status.ATTEMPTING)


@dataclass(frozen=True, kw_only=True)
class ChatRecoveryContext:
    """What ``on_chat_recovery`` and ``should_keep_recovering`` are told about an attempt."""

    incident_id: str
    recovery_root_request_id: str
    attempt: int
    max_attempts: int
    recovery_kind: Kind
    # The cut turn: its stream and request ids.
    stream_id: str
    request_id: str
    partial_text: str
    partial_parts: list[dict[str, Any]]
    # What the cut turn passed to ``stash()`` (None when it stashed nothing).
    recovery_data: Any
    messages: list[dict[str, Any]]
    last_body: dict[str, Any] | None
    last_client_tools: list[dict[str, Any]] | None
    # When the interrupted turn started, so a staleness check (``timezone.now() - ctx.created_at``)
    # ports as the reference's ``Date.now() - ctx.createdAt``.
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class ChatRecoveryProgressContext:
    """What ``should_keep_recovering`` is told: the reference's progress context, durations in seconds."""

    incident_id: str
    request_id: str
    recovery_root_request_id: str
    attempt: int
    max_attempts: int
    recovery_kind: Kind
    # Content chunks produced since the incident opened (the cut turn's and every attempt's).
    work: int
    # Seconds since the incident opened (the reference's ``ageMs`` / 1000).
    age: float


@dataclass(frozen=True, kw_only=True)
class ChatRecoveryExhaustedContext:
    """What ``on_exhausted`` is told when an incident is given up."""

    reason: Reason
    incident_id: str
    recovery_root_request_id: str
    attempt: int
    max_attempts: int
    terminal_message: str
    partial_text: str
    partial_parts: list[dict[str, Any]]
    recovery_data: Any


KeepRecovering = Callable[[ChatRecoveryProgressContext], bool | Awaitable[bool]]
OnExhausted = Callable[[ChatRecoveryExhaustedContext], Any]


@dataclass(frozen=True, kw_only=True)
class ChatRecovery:
    """``ChatAgent.chat_recovery``: how hard an interrupted turn is recovered.

    * ``max_attempts`` (10): attempts without progress before giving up.
    * ``stable_timeout`` (10 s): how long an attempt waits for the conversation to be stable
      before it runs: no other message waiting on the user (an approval, a client tool call).
      Still unstable then, the attempt parks as one waiting on the user does
      (docs/architecture.md#attempt). Other turns need no wait: the attempt holds the instance.
    * ``no_progress_timeout`` (300 s): give up when no attempt has produced content for this long
      (a progressing incident may run longer).
    * ``max_recovery_work`` (1000): give up once the attempts together produced this many content
      chunks (a runaway that keeps streaming and dying). ``math.inf``: never.
    * ``terminal_message``: what the user is shown when recovery gives up.
    * ``max_oom_retries`` (3): cuts of one incident that the platform reported as out-of-memory
      kills before giving up with ``out_of_memory`` (0: on the first). Such a cut never counts as
      progress (docs/architecture.md#out-of-memory).
    * ``should_keep_recovering(ctx)``: asked from the second attempt on with a
      ``ChatRecoveryProgressContext`` (``work``, ``age``); False gives up with
      ``recovery_aborted``; raising means keep recovering.
    * ``on_exhausted(ctx)``: called (errors logged and swallowed) before the user is shown
      ``terminal_message``.
    """

    max_attempts: int = 10
    stable_timeout: float = 10.0
    no_progress_timeout: float = 300.0
    max_recovery_work: float = 1000
    terminal_message: str = TERMINAL_MESSAGE
    max_oom_retries: int = 3
    should_keep_recovering: KeepRecovering | None = field(default=None, compare=False)
    on_exhausted: OnExhausted | None = field(default=None, compare=False)

    @classmethod
    def resolve(cls, value: "ChatRecovery | dict[str, Any] | bool | None") -> "ChatRecovery":
        """The settings an agent's ``chat_recovery`` stands for, normalised as the reference does.

        Recovery is always on: ``True``, ``False`` and ``None`` all mean the defaults (the
        reference ignores ``chatRecovery = false`` too). A dict gives some fields by name.

        Raises:
            TypeError: an unknown key, or a value of the wrong type.
        """
        if isinstance(value, bool) or value is None:
            return cls()
        if isinstance(value, dict):
            value = cls(**value)
        if not isinstance(value, cls):
            raise TypeError(f"chat_recovery must be a ChatRecovery, a dict or a bool, not {type(value).__name__}")
        work = value.max_recovery_work
        return replace(
            value,
            max_attempts=max(1, math.floor(value.max_attempts)),
            stable_timeout=max(0.0, float(value.stable_timeout)),
            no_progress_timeout=max(0.0, float(value.no_progress_timeout)),
            max_recovery_work=cls.max_recovery_work if work < 0 else work,
            max_oom_retries=max(0, math.floor(value.max_oom_retries)),
        )


@dataclass(frozen=True)
class Budget:
    """An incident's spending so far, as stored on its row."""

    # Attempts since the last one that made progress (1 for the first attempt).
    attempt: int
    # Content chunks produced by every attempt of the incident (and the cut turn).
    work: int
    # When content was last produced (the cut turn's start for a new incident).
    last_progress_at: datetime
    # Cuts the platform reported as out-of-memory kills (never reset by progress).
    oom_attempts: int = 0


def charge(budget: Budget | None, produced: int, *, now: datetime, started_at: datetime,
           out_of_memory: bool = False) -> Budget:
    """The budget after a cut turn that produced ``produced`` content chunks.

    A new incident starts at attempt 1. Content produced by the cut attempt is progress: the
    attempt count starts again at 1 and the no-progress clock is reset, but the work counter
    keeps growing (the reference's ``noProgressTimeoutMs``, ``maxRecoveryWork``). A cut by the
    out-of-memory killer counts against ``max_oom_retries`` and is never progress: what it
    produced is the very re-run that runs out of memory again.
    """
    ooms = (budget.oom_attempts if budget is not None else 0) + out_of_memory
    if out_of_memory:
        produced = 0
    if budget is None:
        return Budget(attempt=1, work=produced, last_progress_at=now if produced else started_at, oom_attempts=ooms)
    if produced:
        return Budget(attempt=1, work=budget.work + produced, last_progress_at=now, oom_attempts=ooms)
    return Budget(attempt=budget.attempt + 1, work=budget.work, last_progress_at=budget.last_progress_at,
                  oom_attempts=ooms)


def exhausted_by(config: ChatRecovery, budget: Budget, *, now: datetime) -> Reason | None:
    """The budget this attempt would overspend, if any (None: attempt it).

    Checked before ``should_keep_recovering``, which the caller asks only when this returns
    None and from the second attempt on: the budgets win over the predicate.
    """
    if budget.oom_attempts > config.max_oom_retries:
        return Reason.OUT_OF_MEMORY
    if budget.attempt > config.max_attempts:
        return Reason.MAX_ATTEMPTS
    if (now - budget.last_progress_at).total_seconds() > config.no_progress_timeout:
        return Reason.NO_PROGRESS
    if budget.work > config.max_recovery_work:
        return Reason.WORK_BUDGET
    return None


def incident_id(root_request_id: str, latest_user_message_id: str) -> str:
    """The identity of an incident: its root request and the latest user message (not the kind,
    so retry and continue attempts of one request share a budget)."""
    return f"{root_request_id}:{latest_user_message_id}"


# Chunk types that are content: producing them is progress (the reference's progress counter).
_CONTENT_CHUNKS = frozenset({
    "text-delta", "reasoning-delta", "tool-input-available", "tool-output-available", "tool-output-error",
    "tool-approval-request", "file", "source-url", "source-document",
})


def is_content(chunk: dict[str, Any]) -> bool:
    """Whether a streamed chunk counts as progress (text, tool calls and results, files, data)."""
    kind = chunk.get("type")
    return kind in _CONTENT_CHUNKS or (isinstance(kind, str) and kind.startswith("data-"))
