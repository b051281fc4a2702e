"""Settings of the agents app, with their defaults (kept once read; ``override_settings`` is seen).

Each default is documented here, in the style of ``django/conf/global_settings.py``. Projects set
any of them in ``settings.py``; the README's configuration table lists the environment variables
that ``thinkproject/settings.py`` maps onto them.
"""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # Import strings of the ChatAgent subclasses this site serves.
    "AGENT_CLASSES": [],
    # Model used by agents that do not override get_model(): "demo" or a pydantic-ai model string.
    "AGENT_MODEL": "demo",
    # Base URL and key for an OpenAI-compatible server (vLLM, LM Studio, llama.cpp, a proxy).
    "AGENT_MODEL_BASE_URL": None,
    "AGENT_MODEL_API_KEY": None,
    # Delay between words of the offline demo model, in milliseconds (makes streaming visible).
    "AGENT_DEMO_DELAY_MS": 15,
    # Largest client frame accepted, in bytes (default 4 MiB). Bigger frames get an error frame.
    "AGENT_MAX_FRAME_BYTES": 4 * 1024 * 1024,
    # Largest file a message may carry inline (a data: URL of a ``file`` part), decoded, in bytes
    # (default 1 MiB: it is stored with its message, and the client re-sends it every turn). Bigger
    # files get an error frame asking for a URL; None: no limit but the frame's (llm/files.py).
    "AGENT_MAX_FILE_BYTES": 1024 * 1024,
    # Frames one connection may send: a burst, refilled at per_second. Beyond it a frame is dropped
    # with a "rate_limited" error frame (the real client sends a few frames per turn).
    "AGENT_FRAME_RATE": {"per_second": 20.0, "burst": 100},
    # Most messages one chat request (or setMessages) may carry; more get an error frame. The
    # client re-sends the whole history, so this is also the longest conversation it can continue
    # (bound yours with max_persisted_messages). Each model request walks the whole history on the
    # event loop inside pydantic-ai (about 15 ms per 1,000 messages): at 2,000 the other
    # connections of the process never wait much more than that.
    "AGENT_MAX_MESSAGES_PER_REQUEST": 2_000,
    # Most turns one user may have queued or running at once, over all instances and processes;
    # a chat request beyond it gets an error frame and stores nothing. None: no limit.
    "AGENT_MAX_ACTIVE_TURNS_PER_USER": 20,
    # Token quotas (input + output tokens, counted per UTC day and calendar month; None: no
    # limit). "user_per_day"/"user_per_month": each user's tokens over every agent (an admin
    # "user quota" replaces both for one user); "agent_per_day"/"agent_per_month": each agent's
    # tokens over every user, keyed by agent slug ("*": every agent without its own key). A turn
    # over a limit gets an error frame before any model request (docs/operations.md#usage-and-quotas).
    "AGENT_USAGE_QUOTAS": {"user_per_day": None, "user_per_month": None, "agent_per_day": {}, "agent_per_month": {}},
    # Prices per million tokens by model name (as ``TurnUsage.model`` shows it), for the cost of
    # each turn: {"gpt-4o-mini": {"input": "0.15", "output": "0.60"}}. Models not listed have no cost.
    "AGENT_MODEL_PRICES": {},
    # Who may read /metrics (docs/operations.md#metrics): a request with ``Authorization: Bearer
    # <token>`` when a token is set, or from an address in the allow-list (exact IPs or networks).
    "AGENT_METRICS_TOKEN": None,
    "AGENT_METRICS_ALLOWED_IPS": ["127.0.0.1", "::1"],
    # Trace turns and model calls with OpenTelemetry through pydantic-ai's own instrumentation
    # (its spans go to the globally configured tracer provider; off: no spans are made).
    "AGENT_OTEL_TRACING": False,
    # Largest number of model requests in one turn (tool loops), as pydantic-ai's request limit.
    "AGENT_MAX_STEPS": 10,
    # Make a turn's first model request with pydantic-ai's direct API, and go on as an agent run
    # only when the model calls tools (``agents_app.llm.direct``): a quarter less CPU per turn. Off
    # runs every turn wholly as an agent run (what the equivalence test compares with).
    "AGENT_DIRECT_FIRST_STEP": True,
    # Store each reply's chunks so a reconnecting client resumes mid-stream. Off only to measure
    # what storing costs (the "stream buffer off" row of bench/stream.py): a reconnect then replays nothing.
    "AGENT_STREAM_BUFFER": True,
    # How long a ``pending`` action-ledger row with an explicit idempotency key may stay pending
    # before another call may reclaim and re-run it (a timedelta; default 5 minutes, the
    # reference's actionLedgerPendingRetryLeaseMs). None: a pending row blocks retries until swept.
    "AGENT_ACTION_LEDGER_PENDING_RETRY_LEASE": timedelta(minutes=5),
    # Retention of action-ledger rows, by ``updated_at``: settled rows 30 days, pending rows
    # 90 days (keep it far above the lease), deleted ``batch_size`` rows per statement. A
    # partial dict overrides only its keys; a ttl of None keeps those rows forever.
    "AGENT_ACTION_LEDGER_RETENTION": {
        "settled": timedelta(days=30),
        "pending": timedelta(days=90),
        "batch_size": 500,
    },
    # How long a parked durable-pause call waits for a decision before the sweep removes it and
    # tells the model the request expired (a timedelta; default 30 days, the
    # reference's actionPendingApprovalTtlMs). None: parked calls wait forever.
    "AGENT_ACTION_PENDING_APPROVAL_TTL": timedelta(days=30),
    # Where the turn that follows a durable-pause decision runs: "celery" (a worker, so the model
    # reacts with nobody connected, whichever process decided) or "inline" (in the deciding
    # call, before it returns: single-process setups and the in-process test suite).
    "AGENT_APPROVAL_CONTINUATION": "celery",
    # Where a claimed scheduled run runs: "celery" (the ``agents_app.run_schedule`` task, on a
    # worker) or "inline" (in the call that claimed it: the ticker, an admin "run now"; for the
    # in-process test suite).
    "AGENT_SCHEDULE_RUNS": "celery",
    # A scheduled run that was claimed but not started, or started but not finished, for this
    # long (a timedelta; default 15 minutes) was lost with a broker, a ticker or a worker: the
    # ticker sends it again, or records what became of its turn (``schedules.recover_lost``).
    # Keep it above the time runs may wait in the Celery queue when many are due at once.
    "AGENT_SCHEDULE_RUN_LEASE": timedelta(minutes=15),
    # Where the recovery of a turn cut by a crash runs: "celery" (a worker: the process that
    # noticed the crash may be a Daphne serving other users) or "inline" (the process that
    # noticed it: single-process setups and the in-process test suite). The beat sweep, which
    # runs on a worker, always recovers on that worker. A stalled stream recovers where it ran.
    "AGENT_RECOVERY": "celery",
    # How long a message sent over the REST API with ``wait=true`` waits for its reply, in seconds
    # (default 30); a reply still running then is answered with its status (202), not an error.
    "AGENT_API_WAIT_TIMEOUT": 30.0,
    # On PostgreSQL, waits for turns (REST wait=true, programmatic turns, approvals, destroy) are
    # woken by LISTEN/NOTIFY on a connection of each waiting process's own (agents_app/waits.py);
    # False: they poll, as on SQLite (set it behind a pooler in transaction mode, which cannot LISTEN).
    "AGENT_LISTEN_NOTIFY": True,
    # A process closes an MCP connection no turn has used for this many seconds (default 300);
    # the next turn that needs the server opens it again (docs/architecture.md#mcp-servers).
    "AGENT_MCP_IDLE_SECONDS": 300.0,
    # After a connection to an MCP server fails, turns on this process go without it for this
    # many seconds before one tries again (default 5): a server that is down is not dialled by
    # every turn.
    "AGENT_MCP_RETRY_SECONDS": 5.0,
    # The secrets an MCP server added at runtime may reference in its headers, as "env:NAME" or
    # "setting:NAME" (default none): whoever adds one picks its URL, and the secret goes there.
    # Servers declared in code may reference any (docs/architecture.md#runtime-server-secrets).
    "AGENT_MCP_SECRET_NAMES": (),
    # Seconds a server process that shuts down (SIGTERM) lets its running turns end on their own
    # before it hands the rest to recovery (docs/operations.md#lifespan). Keep it below the process
    # manager's stop timeout; 0 hands every running turn off at once.
    "AGENT_SHUTDOWN_GRACE_SECONDS": 10.0,
}


# The values read so far. A turn reads a dozen, and a setting left at its default cost ``getattr``
# an AttributeError raised and caught each time (about 2 µs). Django's ``setting_changed`` signal
# (``override_settings``, pytest-django's ``settings``) drops a value that changes; a setting
# changed without it (an assignment to ``django.conf.settings`` while the process runs) is not seen,
# as with Django's own cached settings.
_values: dict[str, Any] = {}


def get(name: str) -> Any:
    """The value of an ``AGENT_*`` setting, or its documented default."""
    try:
        return _values[name]
    except KeyError:
        value = _values[name] = getattr(settings, name, DEFAULTS[name])
        return value


def _forget(*, setting: str, **kwargs: object) -> None:
    _values.pop(setting, None)


setting_changed.connect(_forget, dispatch_uid="agents_app.conf")
