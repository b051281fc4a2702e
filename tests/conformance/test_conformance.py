"""The real ``@cloudflare/ai-chat`` client (``useAgentChat``, run by ``harness.mjs`` under Node)
against a live server.

One Redis + ASGI server serves every scenario of the module, with the demo MCP server its demo
agent declares, as under ``make run`` (the "mcp" scenario: ``onMcpUpdate`` sees it); each
scenario uses its own agent instance. ``node_modules`` is installed from the lock file on first
use (``npm ci``), so the suite needs ``node``/``npm`` and ``redis-server`` but never skips.
"""

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.demo_mcp import DemoMcpServer
from tests.support.live import LiveStack, RedisServer, Server

pytestmark = pytest.mark.conformance

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "harness.mjs"
# Packages the harness imports; if any is missing, node_modules is reinstalled.
REQUIRED_PACKAGES = ("agents", "@cloudflare/ai-chat", "ai", "@ai-sdk/react", "react", "react-dom", "ws", "jsdom")
SCENARIOS = [
    "basic",
    "hydrate",
    "observer",
    "cancel",
    "clear",
    "regenerate",
    "setmessages",
    "error",
    "resume",
    "reload",
    "unauthenticated",
    "approve",
    "reject",
    "approvereload",
    "clienttool",
    "progress",
    "action-approval",
    "durable-pause",
    "recovering",
    "mcp",
]
USERNAME = "conformance"
NPM_TIMEOUT = 280
SCENARIO_TIMEOUT = 120
LOG_TAIL_LINES = 80


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; the conformance suite needs Node.js 20+ and npm")
    return path


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """The pinned npm packages, installed with ``npm ci`` from package-lock.json when missing."""
    modules = HERE / "node_modules"
    if not all((modules / name / "package.json").exists() for name in REQUIRED_PACKAGES):
        result = subprocess.run(
            [_tool("npm"), "ci", "--no-audit", "--no-fund"],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=NPM_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            pytest.fail(f"npm ci failed in {HERE}:\n{result.stdout}\n{result.stderr}")
    return modules


@pytest.fixture(scope="module")
def live_daphne(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveStack, Server]]:
    workdir = tmp_path_factory.mktemp("conformance")
    redis = RedisServer(workdir)
    # The demo agent declares the demo MCP server, as under `make run` (the "mcp" scenario).
    mcp = DemoMcpServer(workdir)
    # The test agents (StallAgent for "recovering") beside the demo agent.
    stack = LiveStack(workdir, redis.url, extra_env={"DJANGO_SETTINGS_MODULE": "tests.support.settings_live",
                                                     "DEMO_MCP_URL": mcp.url})
    try:
        stack.create_user(USERNAME)
        yield stack, stack.start_server()
    finally:
        stack.stop()
        mcp.stop()
        redis.stop()


@pytest.fixture(scope="module")
def cookie(live_daphne: tuple[LiveStack, Server]) -> str:
    return live_daphne[1].login(USERNAME)


def _result_line(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            parsed: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
            return parsed
    return None


def _decode(output: bytes | str | None) -> str:
    """Output captured by ``subprocess.TimeoutExpired``: bytes even when ``text=True`` was asked."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def _log_tail(stack: LiveStack, daphne: Server) -> str:
    log = stack.workdir / f"daphne-{daphne.port}.log"
    if not log.exists():
        return "(no server log)"
    return "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(scenario: str, node_modules: Path, live_daphne: tuple[LiveStack, Server], cookie: str) -> None:
    stack, daphne = live_daphne
    try:
        proc = subprocess.run(
            [_tool("node"), str(HARNESS), scenario, f"127.0.0.1:{daphne.port}", cookie],
            cwd=HERE,
            capture_output=True,
            text=True,
            timeout=SCENARIO_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"harness {scenario!r} did not finish in {SCENARIO_TIMEOUT}s:\n"
            f"{_decode(exc.stdout)}\n{_decode(exc.stderr)}\n--- server log (tail)\n{_log_tail(stack, daphne)}"
        )
    result = _result_line(proc.stdout)
    report = (
        f"harness exit code {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        f"\n--- server log (tail)\n{_log_tail(stack, daphne)}"
    )
    assert result is not None, f"the harness printed no RESULT line\n{report}"
    assert result["ok"], f"{scenario}: {result.get('reason')}\n{report}"
    assert proc.returncode == 0, f"{scenario} passed but the harness exited with {proc.returncode}\n{report}"
