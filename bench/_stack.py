"""What the benchmarks share: a throwaway server stack, a cf_agent_* client turn, CPU and statistics.

The stack reuses ``tests/support/live.py``: a Redis on a free port, a fresh database migrated by
``manage.py migrate`` (an SQLite file in a temporary directory, or a PostgreSQL cluster of its own
started there as the tests start one), Server processes running the real
``thinkproject.asgi:application`` with the production settings, and a user logged in through
the real login form. Everything listens on 127.0.0.1 and is stopped (by PID) on exit.
"""

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from tests.support.live import (
    DEFAULT_SERVER,
    PYTHON,
    ROOT,
    LiveStack,
    PostgresServer,
    RedisServer,
    Server,
    free_port,
    server_command,
    stop_process,
    wait_for_port,
)
from tests.support.load import make_sessions

RESP = "cf_agent_use_chat_response"
ERROR = "cf_agent_error"
BENCH_USER = "bench"
# The same Origin a browser on localhost sends; ALLOWED_HOSTS accepts it.
ORIGIN = "http://localhost"
CLK_TCK = os.sysconf("SC_CLK_TCK")


DATABASES = ("sqlite", "postgres")


# --------------------------------------------------------------------------------------- stack
class Stack:
    """Redis + a migrated database + ``processes`` Server processes + a logged-in bench user.

    ``database``: "sqlite" (a fresh file, the embedded default) or "postgres" (a throwaway cluster,
    ``tests.support.live.PostgresServer``, with a fresh database; ``database_pid`` roots its
    processes, whose CPU is part of our server side).

    ``extra_env`` is added to the servers' environment (e.g. ``AGENT_LOG_LEVEL=INFO``); ``app`` is
    the ASGI application of the project processes; ``server`` the ASGI server they run
    (``tests.support.live.SERVERS``; ``THINK_SERVER`` sets the default, uvicorn). ``profile_dir``: run each Server under
    ``cProfile`` and write ``server-<port>.prof`` there when it stops (servers exit cleanly on
    SIGTERM, so the profile is flushed; cProfile sees the event-loop thread only).
    """

    def __init__(self, processes: int = 1, *, profile_dir: Path | None = None, keep: bool = False,
                 app: str = "thinkproject.asgi:application", extra_env: dict[str, str] | None = None,
                 server: str = DEFAULT_SERVER, database: str = "sqlite") -> None:
        if database not in DATABASES:
            raise ValueError(f"database is one of {DATABASES}, not {database!r}")
        self.processes = processes
        self.database = database
        self.server = server
        self.app = app
        self.extra_env = {"AGENT_LOG_LEVEL": "WARNING", **(extra_env or {})}
        self.profile_dir = profile_dir
        self.keep = keep
        self.workdir = Path(tempfile.mkdtemp(prefix="think-bench-"))
        self.redis: RedisServer | None = None
        self.postgres: PostgresServer | None = None
        self.live: LiveStack | None = None
        self.servers: list[Server] = []
        self.extra: list[subprocess.Popen[Any]] = []
        self.cookie = ""

    def __enter__(self) -> "Stack":
        try:
            self.redis = RedisServer(self.workdir)
            url = None
            if self.database == "postgres":
                self.postgres = PostgresServer(self.workdir)
                url = self.postgres.new_database("bench")
            self.live = LiveStack(self.workdir, self.redis.url, database_url=url, extra_env=self.extra_env)
            self.live.create_user(BENCH_USER)
            self.servers = [self._start(self.app) for _ in range(self.processes)]
            self.cookie = self.servers[0].login(BENCH_USER)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _start(self, app: str, extra_env: dict[str, str] | None = None) -> Server:
        assert self.live is not None
        env = {**self.live.env, **(extra_env or {})}
        port = free_port()
        prefix: list[str] = [PYTHON]
        if self.profile_dir is not None:
            self.profile_dir.mkdir(parents=True, exist_ok=True)
            prefix += ["-m", "cProfile", "-o", str(self.profile_dir / f"server-{port}.prof")]
        log = open(self.workdir / f"server-{port}.log", "ab")  # noqa: SIM115 - lives as long as the process
        proc = subprocess.Popen([*prefix, *server_command(self.server, port, app)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.extra.append(proc)
        wait_for_port(port, proc)
        return Server(proc, port)

    def start_bare(self) -> Server:
        """A second Server serving ``bench.bare_asgi:application`` (the stack's ceiling)."""
        return self._start("bench.bare_asgi:application")

    def start_project(self, extra_env: dict[str, str]) -> Server:
        """One more project Server (same database and Redis, not in ``daphnes``) whose environment
        adds ``extra_env`` to the stack's, e.g. ``{"AGENT_STREAM_BUFFER": "0"}``."""
        return self._start(self.app, extra_env)

    def crowd(self, count: int) -> list[str]:
        """``Cookie`` values of ``count`` new users, each logged in (sessions made in bulk): one
        per room, as independent clients are, so the per-user turn limit
        (``AGENT_MAX_ACTIVE_TURNS_PER_USER``) does not refuse a benchmark's many rooms."""
        assert self.live is not None
        return make_sessions(self.live, count, prefix=f"crowd-{uuid.uuid4().hex[:8]}-")

    @property
    def redis_pid(self) -> int:
        assert self.redis is not None
        return self.redis.proc.pid

    @property
    def database_pid(self) -> int | None:
        """The root of the PostgreSQL cluster's processes (None on SQLite: the servers run it)."""
        return None if self.postgres is None else self.postgres.proc.pid

    def database_cpu(self) -> float:
        """CPU seconds of the database processes so far (``cpu_seconds_tree``; 0 on SQLite)."""
        return 0.0 if self.postgres is None else cpu_seconds_tree(self.postgres.proc.pid)

    def close(self) -> None:
        # SIGINT: uvicorn re-raises the signal it stopped on, and a SIGTERM would end the process
        # before cProfile writes its file; a KeyboardInterrupt lets it.
        for proc in reversed(self.extra):
            stop_process(proc, signal.SIGINT, timeout=30)
        self.extra.clear()
        if self.live is not None:
            self.live.stop()
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.stop()
        if not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a script that runs a ``Stack``: ``--env``, ``--keep``, ``--json``, ``--profile``."""
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="extra environment of our servers, e.g. AGENT_LOG_LEVEL=INFO (repeatable)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (server logs, database) and print its path")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="run the servers under cProfile, writing DIR/server-<port>.prof on exit")


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` options as a dict."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env wants KEY=VALUE, got {pair!r}")
        out[key] = value
    return out


def machine_load() -> str:
    """The load average, printed with the results: other processes on the machine skew wall times."""
    with open("/proc/loadavg") as f:
        return "loadavg " + " ".join(f.read().split()[:3]) + f", {os.cpu_count()} CPUs"


# --------------------------------------------------------------------------------------- /proc
def cpu_seconds(pids: Sequence[int]) -> float:
    """utime+stime of the processes (all their threads), from ``/proc/<pid>/stat``."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def cpu_seconds_tree(root: int) -> float:
    """CPU seconds of ``root`` and every process below it, including those that exited and were
    reaped (``cutime``/``cstime``): a PostgreSQL cluster, whose backends come and go with their
    connections and whose CPU would otherwise leave with them."""
    total = 0.0
    for pid in descendants(root):
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / CLK_TCK
    return total


def cpu_seconds_fine(pids: Sequence[int]) -> float:
    """CPU time of the processes' live threads in nanosecond resolution (``/proc/<pid>/task/*/schedstat``),
    for windows of a few ticks where ``cpu_seconds`` (10 ms ticks) is too coarse. Threads that exit
    between two readings take their time with them; server's threads live as long as the process."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError, IndexError, ValueError), \
                        open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
    return total / 1e9


def rss_mb(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (one scan of /proc, bounded by the process count)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, frontier = [root], [root]
    while frontier:
        frontier = [c for p in frontier for c in children.get(p, [])]
        found += frontier
    return found


# --------------------------------------------------------------------------------------- statistics
def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p95(xs: Sequence[float]) -> float:
    """Nearest-rank 95th percentile, the same rule as the peer's ``peer_client.py``."""
    if not xs:
        return float("nan")
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * (len(ordered) - 1))))]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    """A Markdown table (readable in a terminal, pasteable into README.md); the first ``left``
    columns (labels) are left-aligned, the figures right-aligned."""
    def cell(v: Any) -> str:
        if not isinstance(v, float):
            return str(v)
        if v != v:
            return "nan"
        return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"

    rule = "|" + "|".join("---" if i < left else "--:" for i in range(len(headers))) + "|"
    lines = ["| " + " | ".join(headers) + " |", rule]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def report(title: str, headers: list[str], rows: list[list[Any]]) -> None:
    """Print a benchmark's result: its title (a Markdown heading), the table, and the load after."""
    print()
    print(f"## {title}")
    print(table(headers, rows))
    print(f"machine after: {machine_load()}")


# --------------------------------------------------------------------------------------- client
async def open_socket(url: str, cookie: str | None = None) -> ClientConnection:
    """A WebSocket as a browser on localhost opens it (Origin, session cookie), no compression."""
    headers = {"Origin": ORIGIN}
    if cookie:
        headers["Cookie"] = cookie
    return await connect(url, additional_headers=headers, max_size=None, compression=None, open_timeout=30)


async def drain_connect_frames(ws: ClientConnection, count: int = 2, timeout: float = 10) -> None:
    """Read the connect-time frames (identity, MCP servers)."""
    for _ in range(count):
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame.get("type") == "error":
            raise RuntimeError(f"server refused the connection: {frame}")


def chat_request(request_id: str, messages: list[dict[str, Any]], **custom: Any) -> str:
    body = {"messages": messages, "trigger": "submit-message", **custom}
    return json.dumps({"type": RESP.replace("response", "request"), "id": request_id,
                       "init": {"method": "POST", "body": json.dumps(body)}})


def user_message(message_id: str, text: str) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]}


def assistant_message(message_id: str, text: str) -> dict[str, Any]:
    """A text reply as ``useAgentChat`` keeps it and sends it back (under the server's id, from the
    ``start`` chunk), which the server finds stored as it is."""
    return {"id": message_id, "role": "assistant",
            "parts": [{"type": "step-start"}, {"type": "text", "text": text, "state": "done"}]}


@dataclass
class TurnResult:
    """One timed turn. Times are seconds from the send of the request."""

    total: float
    first_chunk: float
    first_delta: float
    deltas: int
    frames: int
    text: str
    message_id: str | None
    # Bytes of all text-delta frames (mean frame size = delta_bytes / deltas).
    delta_bytes: int = 0
    errors: list[str] = field(default_factory=list)


async def timed_turn(ws: ClientConnection, request: str, request_id: str, timeout: float = 120) -> TurnResult:
    """Send ``request`` and read until its ``done`` frame.

    First chunk = first response frame of the request with a non-empty body (the peer's rule);
    chunks = ``text-delta`` frames. Frames of other types (transcript broadcasts) are skipped, but
    our ``cf_agent_error`` for the request (a refused request: it has no ``done``) ends the turn
    with that error.
    """
    t_send = time.monotonic()
    await ws.send(request)
    deadline = t_send + timeout
    t_first = t_delta = None
    deltas = frames = size = 0
    text: list[str] = []
    message_id = None
    errors: list[str] = []
    while True:
        raw = await asyncio.wait_for(ws.recv(), max(0.001, deadline - time.monotonic()))
        frame = json.loads(raw)
        if frame.get("type") == ERROR and frame.get("id") in (request_id, None):
            errors.append(f"{frame.get('code')}: {frame.get('error')}")
            break
        if frame.get("type") != RESP or frame.get("id") != request_id:
            continue
        frames += 1
        body = frame.get("body")
        if frame.get("error"):
            errors.append(str(body))
        if body and not frame.get("done") and not frame.get("error"):
            now = time.monotonic()
            if t_first is None:
                t_first = now
            chunk = json.loads(body)
            kind = chunk.get("type")
            if kind == "text-delta":
                if t_delta is None:
                    t_delta = now
                size += len(raw.encode()) if isinstance(raw, str) else len(raw)
                deltas += 1
                text.append(chunk.get("delta", ""))
            elif kind == "start":
                message_id = chunk.get("messageId")
        if frame.get("done"):
            break
    t_end = time.monotonic()
    return TurnResult(total=t_end - t_send, first_chunk=(t_first or t_end) - t_send,
                      first_delta=(t_delta or t_end) - t_send, deltas=deltas, frames=frames,
                      text="".join(text), message_id=message_id, delta_bytes=size, errors=errors)
