"""The process's Prometheus metrics, and the few calls that record them.

Counters and histograms are kept per process; with ``PROMETHEUS_MULTIPROC_DIR`` set in the
environment before the process starts, prometheus_client writes them to files in that
directory instead, and ``/metrics`` sums every process's files (``metrics.views``): uvicorn's
``--workers`` and Celery's worker processes alike (docs/operations.md#multi-process). Facts the
database holds (queued turns, pending approvals, ledger rows) are not kept here but read at
scrape time (``metrics.collector``).

Labels are bounded: agent slugs (``AGENT_CLASSES``), turn statuses, a few recovery reasons.
"""

import datetime

from prometheus_client import Counter, Gauge, Histogram

# Seconds: a turn runs from a fraction of a second to minutes of tool loops.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
FIRST_CHUNK_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LAG_BUCKETS = (0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)

TURNS_STARTED = Counter("agents_turns_started", "Turns that started running (their model call began).", ["agent"])
TURNS_FINISHED = Counter("agents_turns_finished", "Turns that ended, by how (the turn's status).", ["agent", "outcome"])
TURN_DURATION = Histogram(
    "agents_turn_duration_seconds", "From a turn's start to its end.", ["agent"], buckets=DURATION_BUCKETS
)
FIRST_CHUNK = Histogram(
    "agents_turn_first_chunk_seconds",
    "From a turn's acceptance (queue wait included) to its first reply chunk sent.",
    ["agent"],
    buckets=FIRST_CHUNK_BUCKETS,
)
CHUNKS = Counter("agents_chunks_streamed", "Reply chunks streamed to clients.", ["agent"])
OPEN_SOCKETS = Gauge(
    "agents_open_websockets", "WebSocket connections open on the serving processes.", multiprocess_mode="livesum"
)
RECOVERY_INCIDENTS = Counter(
    "agents_recovery_incidents", "Cut turns found and sent to recovery, by reason.", ["reason"]
)
RECOVERY_ENDED = Counter("agents_recovery_ended", "Recovery incidents that ended, by outcome.", ["outcome"])
SCHEDULE_LAG = Histogram(
    "agents_schedule_lag_seconds", "From a scheduled run's due time to its start.", buckets=LAG_BUCKETS
)
PUBLISH_FAILURES = Counter(
    "agents_channel_layer_publish_failures",
    "Messages to other processes the channel layer dropped (Redis out of reach).",
)
MODEL_TOKENS = Counter(
    "agents_model_tokens", "Model tokens used, by agent and direction (input, output).", ["agent", "direction"]
)
MODEL_REQUESTS = Counter("agents_model_requests", "Model requests made, by agent.", ["agent"])


def first_chunk(agent: str, accepted_at: datetime.datetime, now: datetime.datetime) -> None:
    FIRST_CHUNK.labels(agent).observe(max(0.0, (now - accepted_at).total_seconds()))


def schedule_started(due: datetime.datetime, now: datetime.datetime) -> None:
    SCHEDULE_LAG.observe(max(0.0, (now - due).total_seconds()))


def model_usage(agent: str, requests: int, input_tokens: int, output_tokens: int) -> None:
    if requests:
        MODEL_REQUESTS.labels(agent).inc(requests)
    if input_tokens:
        MODEL_TOKENS.labels(agent, "input").inc(input_tokens)
    if output_tokens:
        MODEL_TOKENS.labels(agent, "output").inc(output_tokens)
