"""What a process's first turn pays for, and what a process holds, in a fresh interpreter
(docs/operations.md#lifespan).

A process that runs the demo model (or any model but Anthropic's and OpenAI's) must not import
their SDKs: 2.7 s of imports on the event loop of its first turn, while every other connection of
the process waited (the 3 to 4 s pauses of ``bench/deploy.py``'s continuations on a new worker).
Nor may a process whose agents have no MCP server import the MCP client (about 44 MB), nor one
that is not ``runserver`` Daphne's app (Twisted, about 16 MB).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SDKS = ("anthropic", "openai", "pydantic_ai.models.anthropic", "pydantic_ai.models.openai")


MCP_CLIENT = ("fastmcp", "pydantic_ai.mcp", "agents_app.mcp._client")


def _modules_after(code: str, modules: tuple[str, ...] = SDKS, *, production: bool = False) -> list[str]:
    """Which of ``modules`` (the provider SDKs) are loaded in a fresh interpreter after Django's
    set-up and ``code``; with the test settings, or with ``production``'s (the demo agent alone,
    its MCP server not set)."""
    script = (f"import django, json, sys\ndjango.setup()\n{code}\n"
              f"print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "thinkproject.settings_test", "PYTHONPATH": str(ROOT)}
    if production:
        env.pop("DEMO_MCP_URL", None)
        env |= {"DJANGO_SETTINGS_MODULE": "thinkproject.settings", "SECRET_KEY": "cold-start-" * 6,
                "CHANNEL_LAYER": "memory"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_warming_and_recovering_with_the_demo_model_import_no_provider_sdk() -> None:
    code = ("from agents_app.operations import server\nfrom agents_app.llm import get_model\n"
            "from agents_app.llm.recovery import strategy_for\n"
            "server.warm_models()\nprint(strategy_for(get_model('demo')))")
    assert _modules_after(code) == []


def test_warming_a_provider_model_imports_its_sdk_at_start() -> None:
    code = ("from agents_app import llm\nimport os\nos.environ.setdefault('ANTHROPIC_API_KEY', 'unused')\n"
            "llm.warm(['anthropic:claude-sonnet-4-5'])")
    assert "pydantic_ai.models.anthropic" in _modules_after(code)


def test_a_server_whose_agents_have_no_mcp_server_imports_neither_the_mcp_client_nor_twisted() -> None:
    """The ASGI application, the agent classes and a turn's own MCP code, with the project's own
    agents: the demo agent declares its server only when ``DEMO_MCP_URL`` is set, as ``make run``
    does."""
    code = ("import thinkproject.asgi\nfrom agents_app import registry\nfrom agents_app.mcp import connections\n"
            "from agents_app.operations import server\nfrom agents_app.demo.agents import DemoAgent\n"
            "assert not server._declares_mcp_servers(DemoAgent)\nregistry.agent_classes()")
    assert _modules_after(code, (*MCP_CLIENT, "daphne", "twisted"), production=True) == []


def test_the_asgi_application_imports_the_mcp_client_when_an_agent_declares_a_server() -> None:
    """At import, for Daphne, which sends no lifespan events (the test settings' agents include
    MCP ones)."""
    code = "from tests.mcp_agents import McpHttpAgent\nimport thinkproject.asgi"
    assert _modules_after(code, MCP_CLIENT) == sorted(MCP_CLIENT)


def test_warming_a_process_whose_agent_declares_an_mcp_server_imports_the_client_at_start() -> None:
    code = ("from agents_app.operations import server\nfrom tests.mcp_agents import McpHttpAgent\n"
            "assert server._declares_mcp_servers(McpHttpAgent)\nserver.warm_models()")
    assert _modules_after(code, MCP_CLIENT) == sorted(MCP_CLIENT)


def test_the_channel_layer_is_made_at_start_up_once_for_every_thread() -> None:
    """Channels' registry makes a layer on first use without a lock: threads that first use it at
    once (a Celery worker's, starting turns) each made their own (docs/architecture.md#turn-control)."""
    script = (
        "import django, json, threading\ndjango.setup()\n"
        "from channels.layers import channel_layers, get_channel_layer\n"
        "made = 'default' in channel_layers.backends\n"
        "barrier, layers = threading.Barrier(16), []\n"
        "def use():\n    barrier.wait()\n    layers.append(get_channel_layer())\n"
        "threads = [threading.Thread(target=use) for _ in range(16)]\n"
        "[t.start() for t in threads]\n[t.join() for t in threads]\n"
        "print(json.dumps([made, type(layers[0]).__name__, len({id(layer) for layer in layers})]))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "thinkproject.settings", "PYTHONPATH": str(ROOT),
           "SECRET_KEY": "cold-start-" * 6, "CHANNEL_LAYER": "redis", "REDIS_URL": "redis://127.0.0.1:9/0"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [True, "FanoutRedisChannelLayer", 1]
