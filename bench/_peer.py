"""The reference peer: the real ``AIChatAgent`` under ``wrangler dev`` (``/work/shared/peer/cf-worker``).

What the scripts that compare against it share: the loopback check on its URL, its process tree
(server CPU and RSS come from ``/proc``), the text its deltas spell, and ``Peer``, which attaches
to a peer someone already runs or builds (``setup.sh``, needs the npm registry) and starts one
(``start.sh``) and stops it again (``stop.sh``, by PID) when it ends. A peer this process did not
start is never stopped.
"""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from urllib.parse import urlparse

from bench._stack import descendants
from tests.support.live import free_port

LOOPBACK = ("127.0.0.1", "localhost", "::1")
PEER_AGENT = "chat-agent"
PEER_LABEL = "peer: AIChatAgent, wrangler dev"
PEER_SOURCE = Path("/work/shared/peer/cf-worker")
PEER_DIR = Path("/tmp/cfpeer")
SETUP_TIMEOUT = 600.0
START_TIMEOUT = 120.0


def is_loopback(url: str) -> bool:
    return urlparse(url).hostname in LOOPBACK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that point a script at the peer: ``--peer``, ``--peer-agent``, ``--peer-pids``,
    ``--peer-dir`` (checked by ``check_arguments``)."""
    parser.add_argument("--peer", help="base URL of a running reference peer, e.g. http://127.0.0.1:8799")
    parser.add_argument("--peer-agent", default=PEER_AGENT, help=f"peer agent slug (default {PEER_AGENT})")
    parser.add_argument("--peer-pids", help="comma-separated PIDs of the peer's processes (server CPU, RSS)")
    parser.add_argument("--peer-dir", type=Path, default=PEER_DIR,
                        help=f"the peer's folder, whose wrangler.pid roots its process tree (default {PEER_DIR})")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.peer and not is_loopback(args.peer):
        parser.error("--peer must be a loopback URL")


def ws_base(url: str) -> str:
    """``http://host:port`` → ``ws://host:port`` (no trailing slash)."""
    return url.replace("http://", "ws://", 1).rstrip("/")


def peer_pids(peer_dir: Path, explicit: str | None = None) -> list[int]:
    """The peer's processes (the wrangler node process, workerd and whatever runs between them):
    ``explicit`` (comma-separated PIDs), else the tree under ``<peer_dir>/wrangler.pid``; empty
    (with a note) when neither is known, so its CPU and RSS are not measured."""
    if explicit:
        return [int(p) for p in explicit.split(",")]
    pid_file = peer_dir / "wrangler.pid"
    if pid_file.exists():
        return descendants(int(pid_file.read_text().strip()))
    print(f"  note: no {pid_file}; the peer's server CPU and RSS are not measured (give --peer-pids)")
    return []


def workerd_pids(pids: list[int]) -> list[int]:
    """The ``workerd`` processes among ``pids``: the runtime that serves, without wrangler's tooling."""
    out = []
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "workerd":
                out.append(pid)
    return out


def watcher_pids(pids: list[int]) -> list[int]:
    """The ``esbuild`` processes among ``pids``: wrangler's file watcher and bundler, dev tooling."""
    out = []
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "esbuild":
                out.append(pid)
    return out


@contextlib.contextmanager
def paused_watcher(pids: list[int]) -> Iterator[list[int]]:
    """wrangler's esbuild watcher stopped (SIGSTOP) for the block and continued (SIGCONT) after,
    also when the block ends by an exception or a SIGTERM: it is dev tooling, not the server, and
    competes with both sides for the machine's cores. Yields the PIDs it paused."""
    paused = watcher_pids(pids)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        for pid in paused:
            os.kill(pid, signal.SIGSTOP)
        yield paused
    finally:
        for pid in paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        signal.signal(signal.SIGTERM, previous)


def b36(i: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        i, r = divmod(i, 36)
        out = digits[r] + out
        if i == 0:
            return out


def peer_expected(n: int, size: int = 4) -> str:
    """The peer's deltas (``peer_client.py expected_text``): base-36 index, padded to 3, a space."""
    out = []
    for i in range(n):
        base = b36(i).rjust(3, "0") + " "
        s = base
        while len(s) < size:
            s += base
        out.append(s[:size])
    return "".join(out)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _listening_port(pid_file: Path) -> int | None:
    """The ``--port`` of a running ``wrangler dev`` started by ``start.sh`` in that folder."""
    if not pid_file.exists():
        return None
    root = int(pid_file.read_text().strip())
    if not _alive(root):
        return None
    for pid in descendants(root):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().decode(errors="replace").split("\0")
            if "--port" in argv and argv.index("--port") + 1 < len(argv):
                return int(argv[argv.index("--port") + 1])
    return None


def _healthy(url: str) -> bool:
    with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2) as response:
        return response.status == 200
    return False


class Peer:
    """A running peer: ``url`` and ``pids()``; ``note`` says why there is none (``url`` is None).

    ``Peer(url=...)`` attaches to a peer someone started (``pid_list`` or ``<peer_dir>/wrangler.pid``
    for its processes). ``Peer(peer_dir=...)`` reuses a peer already running from that folder, or
    builds it there if needed (``setup.sh``), starts it on free ports (``start.sh``) and stops it on
    exit (``stop.sh``). When the build or start fails the reason goes to ``note`` and the comparison
    runs without the peer.
    """

    def __init__(self, *, url: str | None = None, peer_dir: Path = PEER_DIR, source: Path = PEER_SOURCE,
                 pid_list: str | None = None) -> None:
        self.url = url.rstrip("/") if url else None
        self.peer_dir = peer_dir
        self.source = source
        self.pid_list = pid_list
        self.started = False
        self.note = ""

    def __enter__(self) -> "Peer":
        if self.url is None:
            try:
                self._bring_up()
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                self.url = None
                self.note = f"not available: {exc}"
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _run(self, argv: list[str], timeout: float, env: dict[str, str] | None = None) -> None:
        result = subprocess.run(argv, cwd=self.peer_dir if self.peer_dir.exists() else None,
                                env={**os.environ, **(env or {})}, capture_output=True, text=True,
                                timeout=timeout, check=False)
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-12:]
            raise RuntimeError(f"{' '.join(argv)} exited with {result.returncode}:\n    " + "\n    ".join(tail))

    def _bring_up(self) -> None:
        port = _listening_port(self.peer_dir / "wrangler.pid")
        if port is not None:
            self.url = f"http://127.0.0.1:{port}"
            print(f"peer: reusing the one running from {self.peer_dir} at {self.url} (left running)", flush=True)
            return
        if not (self.peer_dir / "node_modules" / ".bin" / "wrangler").exists():
            print(f"peer: building it in {self.peer_dir} ({self.source}/setup.sh, npm registry) ...", flush=True)
            self._run([str(self.source / "setup.sh")], SETUP_TIMEOUT, {"PEER_DIR": str(self.peer_dir)})
        port = free_port()
        t0 = time.monotonic()
        self.started = True  # from here on close() stops whatever start.sh left running
        self._run([str(self.peer_dir / "start.sh")], START_TIMEOUT,
                  {"PORT": str(port), "INSPECTOR_PORT": str(free_port())})
        self.url = f"http://127.0.0.1:{port}"
        if not _healthy(self.url):
            raise RuntimeError(f"{self.url}/health does not answer after start.sh")
        print(f"peer: started at {self.url} in {time.monotonic() - t0:.1f} s "
              f"(pid {(self.peer_dir / 'wrangler.pid').read_text().strip()})", flush=True)

    def pids(self) -> list[int]:
        return peer_pids(self.peer_dir, self.pid_list) if self.url else []

    def close(self) -> None:
        if self.started:
            self.started = False
            subprocess.run([str(self.peer_dir / "stop.sh")], cwd=self.peer_dir, capture_output=True,
                           timeout=60, check=False)
