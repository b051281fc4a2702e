"""A small real MCP server for the tests, built on the official SDK's server API (``MCPServer``).

Run it over stdio (``python tests/support/mcp_server.py stdio``), streamable HTTP
(``python tests/support/mcp_server.py http PORT [--token T]``, at ``/mcp``; with ``--token`` a
request without ``Authorization: Bearer T`` is refused with 401) or SSE (``sse PORT``, at
``/sse``). ``McpHttpServer`` starts an HTTP one as a subprocess for a test and stops it after.

Tools: ``add`` (a + b), ``deploy`` (the tests declare it ``needs_approval``), ``slow`` (sleeps,
for a ``kill -9`` mid-call) and ``big`` (a long text, cut like any tool's output); a prompt and
a resource, so clients see all three kinds.
"""

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

server: MCPServer[Any] = MCPServer("test-tools", instructions="Arithmetic and deployments for the tests.")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def deploy(version: str) -> str:
    """Deploy a version (waits for the user's approval in the tests)."""
    return f"deployed {version}"


# A file the server appends a line to when ``slow`` starts, so a test can tell that a call is
# running on the server (``McpHttpServer.started``), not merely asked for.
CALL_LOG = "TEST_MCP_CALL_LOG"


@server.tool()
async def slow(seconds: float = 30.0) -> str:
    """Sleep, then answer: a call to cut with kill -9."""
    if log := os.environ.get(CALL_LOG):
        with open(log, "a") as calls:
            calls.write("slow\n")
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def big(chars: int = 50_000) -> str:
    """A text of ``chars`` characters."""
    return "x" * chars


@server.prompt()
def greet(name: str) -> str:
    """A greeting prompt."""
    return f"Say hello to {name}."


@server.resource("note://readme")
def readme() -> str:
    """A short note."""
    return "The test server's note."


def _http_app(token: str | None, *, sse: bool = False) -> Any:
    app = server.sse_app() if sse else server.streamable_http_app()
    if token is None:
        return app

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (b"authorization", f"Bearer {token}".encode()) not in scope["headers"]:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"missing or wrong token"})
            return
        await app(scope, receive, send)

    return guarded


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SCRIPT = Path(__file__).resolve()


def stdio_command() -> tuple[str, list[str]]:
    """The command and arguments that run this server over stdio."""
    return sys.executable, [str(SCRIPT), "stdio"]


class McpHttpServer:
    """This server over streamable HTTP in a subprocess, on a free port of 127.0.0.1."""

    def __init__(self, *, token: str | None = None, port: int | None = None, sse: bool = False) -> None:
        self.port = port or free_port()
        self.token = token
        self.sse = sse
        self.process: subprocess.Popen[bytes] | None = None
        self._calls = Path(tempfile.mkdtemp(prefix="mcp-test-server-")) / "calls.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/{'sse' if self.sse else 'mcp'}"

    def start(self) -> "McpHttpServer":
        self._calls.parent.mkdir(exist_ok=True)
        args = [sys.executable, str(SCRIPT), "sse" if self.sse else "http", str(self.port),
                *(["--token", self.token] if self.token else [])]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1", CALL_LOG: str(self._calls)})
        from tests.support.waiting import wait_until

        wait_until(self._listening, f"the MCP test server on port {self.port} to listen", timeout=20)
        return self

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the MCP test server exited with {self.process.returncode}")
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def started(self, tool: str) -> int:
        """How many calls of ``tool`` have started on the server so far (only ``slow`` reports)."""
        if not self._calls.exists():
            return 0
        return self._calls.read_text().splitlines().count(tool)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        shutil.rmtree(self._calls.parent, ignore_errors=True)

    def __enter__(self) -> "McpHttpServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> None:
    if argv[:1] == ["stdio"]:
        server.run("stdio")
        return
    if argv[:1] in (["http"], ["sse"]) and len(argv) >= 2:
        import uvicorn

        token = argv[argv.index("--token") + 1] if "--token" in argv else None
        uvicorn.run(_http_app(token, sse=argv[0] == "sse"), host="127.0.0.1", port=int(argv[1]), log_level="warning")
        return
    raise SystemExit("usage: mcp_server.py stdio | http PORT [--token T] | sse PORT [--token T]")


if __name__ == "__main__":
    main(sys.argv[1:])
