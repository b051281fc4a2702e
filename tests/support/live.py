"""Real processes for tests that cross process boundaries: Redis, ASGI servers, Celery, PostgreSQL.

A ``LiveStack`` owns a database of its own (a SQLite file, or PostgreSQL when asked), migrated
by ``manage.py migrate`` in a subprocess, and starts servers against it with the production
settings module. Tests talk to it only over HTTP and WebSockets, like a browser would.

``migrate`` runs once per settings module and database server in a test run, into a template; each
stack's database is a copy of it (a SQLite backup, or PostgreSQL's ``CREATE DATABASE ... TEMPLATE``).
Migrating took about 5 s of CPU per stack, and a full run starts about a hundred stacks.
"""

import atexit
import contextlib
import http.cookiejar
import json
import os
import queue
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
STARTUP_TIMEOUT = 30.0
# As DAPHNE_WEBSOCKET_MAX_MESSAGE_SIZE in settings (the server commands do not read settings).
MAX_MESSAGE = 16 * 1024 * 1024
# The ASGI server live stacks run: "uvicorn" (production, README "Deployment") or "daphne" (what
# `make run` serves through runserver); THINK_SERVER chooses the default.
SERVERS = ("uvicorn", "daphne")
DEFAULT_SERVER = os.environ.get("THINK_SERVER", "uvicorn")
# uvicorn's WebSocket implementation: the README's; THINK_UVICORN_WS=websockets measures the
# deprecated one beside it (bench/README.md).
UVICORN_WS = os.environ.get("THINK_UVICORN_WS", "websockets-sansio")


def server_command(kind: str, port: int, app: str = "thinkproject.asgi:application", workers: int = 1) -> list[str]:
    """The command line of an ASGI server of ``kind`` on 127.0.0.1:``port``: the README's flags.

    ``workers``: uvicorn's processes sharing the port.
    """
    if kind == "uvicorn":
        return ["-m", "uvicorn", "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
                "--ws", UVICORN_WS, "--ws-max-size", str(MAX_MESSAGE), "--ws-ping-interval", "20",
                "--ws-ping-timeout", "30", *(["--workers", str(workers)] if workers > 1 else []), app]
    if kind == "daphne":
        return ["-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "--websocket-max-message-size",
                str(MAX_MESSAGE), "--websocket-max-frame-size", str(MAX_MESSAGE),
                "--websocket_connect_timeout", "30", app]
    raise ValueError(f"unknown server {kind!r} (one of {SERVERS})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(
    port: int, proc: subprocess.Popen[Any] | None = None, timeout: float = STARTUP_TIMEOUT
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout}s")


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout)


class RedisServer:
    """A throwaway redis-server on a free port, no persistence."""

    def __init__(self, workdir: Path) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        wait_for_port(self.port, self.proc)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        stop_process(self.proc)


class PostgresServer:
    """A throwaway PostgreSQL cluster (initdb into a temp dir), on a free port."""

    def __init__(self, workdir: Path) -> None:
        bindir = _postgres_bindir()
        self.datadir = workdir / "pgdata"
        self.port = free_port()
        run_as = _pg_user_prefix()
        if run_as:
            subprocess.run(["chown", "-R", "postgres", str(workdir)], check=True)
        subprocess.run([*run_as, str(bindir / "initdb"), "-D", str(self.datadir), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8"], check=True, stdout=subprocess.DEVNULL)
        self.proc = subprocess.Popen(
            [*run_as, str(bindir / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
             "-k", str(workdir), "-h", "127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        wait_for_port(self.port, self.proc)
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self._wait_until_accepting()

    def _wait_until_accepting(self) -> None:
        """The port opens before recovery ends ("the database system is starting up"): wait for a session."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def new_database(self, prefix: str) -> str:
        """A fresh, empty database on this server; its URL."""
        import psycopg  # only the PostgreSQL tests need the driver loaded

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGINT)


def database_url(request: Any, kind: str, tmp_path: Path, prefix: str) -> str:
    """A fresh database of ``kind`` ("sqlite", or "postgres" on the ``postgres`` fixture's server)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / f'{prefix}.sqlite3'}"
    server: PostgresServer = request.getfixturevalue("postgres")
    return server.new_database(prefix)


def _postgres_bindir() -> Path:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists():
            return candidate
    raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql)")


def _pg_user_prefix() -> list[str]:
    """initdb refuses to run as root; run the server as the 'postgres' system user then."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


# (settings module, "sqlite" or a PostgreSQL server) → its migrated template: a file, or a database name.
_templates: dict[tuple[str, str], str] = {}
_template_dir: Path | None = None


def _sqlite_template_path() -> Path:
    global _template_dir
    if _template_dir is None:
        _template_dir = Path(tempfile.mkdtemp(prefix="live-templates-"))
        atexit.register(shutil.rmtree, _template_dir, True)
    return _template_dir / f"template-{len(_templates)}.sqlite3"


class LiveStack:
    """Servers of the project, sharing one database and one Redis."""

    def __init__(self, workdir: Path, redis_url: str, database_url: str | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.database_url = database_url or f"sqlite:///{workdir / 'db.sqlite3'}"
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "thinkproject.settings",
            "DATABASE_URL": self.database_url,
            "REDIS_URL": redis_url,
            "VAR_DIR": str(workdir),
            "AGENT_DEMO_DELAY_MS": "0",
            "PYTHONUNBUFFERED": "1",
            # The production settings refuse to start without one (DEBUG is off).
            "SECRET_KEY": os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
            **(extra_env or {}),
        }
        self.procs: list[subprocess.Popen[Any]] = []
        self._migrated_database()

    def _migrated_database(self) -> None:
        """Make the stack's database a copy of the migrated template (migrated first if need be)."""
        settings = self.env["DJANGO_SETTINGS_MODULE"]
        if self.database_url.startswith("sqlite:///"):
            template = _templates.get((settings, "sqlite"))
            if template is None:
                template = str(_sqlite_template_path())
                self.manage("migrate", "--noinput", database_url=f"sqlite:///{template}")
                _templates[(settings, "sqlite")] = template
            target = self.database_url.removeprefix("sqlite:///")
            with contextlib.closing(sqlite3.connect(template)) as source, \
                    contextlib.closing(sqlite3.connect(target)) as copy:
                source.backup(copy)
            return
        server, _, name = self.database_url.rpartition("/")
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            # A server's identity, not its URL: a later throwaway server may get the same port.
            row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
            assert row is not None
            key = (settings, f"{server} {row[0]}")
            template = _templates.get(key)
            if template is None:
                template = f"template_{len(_templates)}"
                conn.execute(f'CREATE DATABASE "{template}"')
                self.manage("migrate", "--noinput", database_url=f"{server}/{template}")
                _templates[key] = template
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')

    def manage(self, *args: str, database_url: str | None = None) -> str:
        """``manage.py *args`` against the stack's database (or ``database_url``); its output."""
        env = self.env if database_url is None else {**self.env, "DATABASE_URL": database_url}
        result = subprocess.run([PYTHON, "manage.py", *args], cwd=ROOT, env=env,
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result.stdout

    def create_user(self, username: str, password: str = "pw", *, staff: bool = False) -> int:
        """Create a user in the stack's database; returns its pk."""
        code = (
            "from django.contrib.auth import get_user_model as g;"
            f"u=g().objects.create_user({username!r}, password={password!r});"
            f"u.is_staff=u.is_superuser={staff!r}; u.save(); print(u.pk)"
        )
        return int(self.manage("shell", "-c", code).split()[-1])  # after the shell's own notes

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[Any]:
        log = open(self.workdir / log_name, "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(args, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_server(self, kind: str = DEFAULT_SERVER, workers: int = 1) -> "Server":
        """One more ASGI server serving the project (``kind``: see ``SERVERS``; ``workers``: uvicorn's)."""
        port = free_port()
        proc = self._spawn([PYTHON, *server_command(kind, port, workers=workers)], f"server-{port}.log")
        wait_for_port(port, proc)
        if workers > 1:  # the port is the parent's; each worker says when it serves
            self._started(proc, f"server-{port}.log", "Application startup complete.", count=workers)
        return Server(proc, port)

    def start_celery_worker(self, name: str = "w1", concurrency: int = 1) -> subprocess.Popen[Any]:
        """A worker with one slot (the solo pool), or ``concurrency`` threads for turns at once."""
        pool = ["--pool", "solo"] if concurrency == 1 else ["--pool", "threads", "--concurrency", str(concurrency)]
        proc = self._spawn([PYTHON, "-m", "celery", "-A", "thinkproject", "worker", *pool,
                            "-n", f"{name}@%h", "--without-heartbeat", "--without-gossip",
                            "--without-mingle", "-l", "info"], f"celery-{name}.log")
        return self._started(proc, f"celery-{name}.log", "ready.")

    def start_celery_beat(self, name: str = "beat") -> subprocess.Popen[Any]:
        """Celery beat with a schedule file of its own, so that several beats can run at once."""
        proc = self._spawn([PYTHON, "-m", "celery", "-A", "thinkproject", "beat", "-l", "info",
                            "--schedule", str(self.workdir / f"celerybeat-{name}")], f"celery-{name}.log")
        return self._started(proc, f"celery-{name}.log", "beat: Starting...")

    def _started(self, proc: subprocess.Popen[Any], log_name: str, ready: str, count: int = 1) -> subprocess.Popen[Any]:
        """``proc`` once its log says ``ready`` (``count`` times); its log if it exits or is not ready
        within STARTUP_TIMEOUT."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        log = self.workdir / log_name
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{log_name} process exited:\n{log.read_text()}")
            if log.exists() and log.read_text().count(ready) >= count:
                return proc
            time.sleep(0.1)
        raise TimeoutError(f"{log_name} process not ready:\n{log.read_text()}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            stop_process(proc)
        self.procs.clear()

    def print_logs(self, lines: int = 60) -> None:
        """The end of every server log, for a failed test's output."""
        for log in sorted(self.workdir.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            print(f"----- {log.name} (last {len(tail)} lines)", *tail, sep="\n")


class Server:
    """A running ASGI server of the project (any kind) and its URLs."""

    def __init__(self, proc: subprocess.Popen[Any], port: int) -> None:
        self.proc, self.port = proc, port
        self.http = f"http://127.0.0.1:{port}"
        self.ws = f"ws://127.0.0.1:{port}"

    def login(self, username: str, password: str = "pw") -> str:
        """Log in through the real login form; returns the ``Cookie`` header value."""
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        opener.open(f"{self.http}/accounts/login/", timeout=10).read()
        csrf = next(c.value for c in jar if c.name == "csrftoken")
        data = urllib.parse.urlencode({"username": username, "password": password,
                                       "csrfmiddlewaretoken": csrf}).encode()
        request = urllib.request.Request(f"{self.http}/accounts/login/", data=data,
                                         headers={"Referer": f"{self.http}/accounts/login/"})
        opener.open(request, timeout=10).read()
        cookies = {c.name: c.value for c in jar}
        if "sessionid" not in cookies:
            raise RuntimeError(f"login of {username!r} failed")
        return "; ".join(f"{k}={v}" for k, v in cookies.items())

    def get_json(self, path: str, cookie: str) -> Any:
        request = urllib.request.Request(f"{self.http}{path}", headers={"Cookie": cookie})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[RedisServer]:
    server = RedisServer(workdir)
    try:
        yield server
    finally:
        server.stop()


class ScriptProcess:
    """A Python script in its own process, spoken to in JSON lines on stdin/stdout.

    Its stdout lines arrive on a queue read by a thread, so a test can wait with a timeout; its
    stderr goes to ``log``, quoted when it falls silent.
    """

    def __init__(self, script: str, env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([PYTHON, "-c", script], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = 60) -> dict[str, Any]:
        try:
            return json.loads(self.lines.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"process {self.proc.pid} said nothing for {timeout}s:\n"
                                 f"{self.log.read_text(errors='replace')[-3000:]}") from None

    def ask(self, **command: Any) -> dict[str, Any]:
        self.send(**command)
        return self.receive()

    def kill(self) -> None:
        """SIGKILL: no ``finally`` runs in it."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """Close its stdin (its loop ends) and wait; kill it if it does not exit."""
        if self.proc.stdin is not None and self.proc.poll() is None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            stop_process(self.proc)
