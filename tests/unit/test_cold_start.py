"""What a process's first turn pays for, in a fresh interpreter (docs/operations.md#lifespan).

A process that runs the demo model (or any model but Anthropic's and OpenAI's) must not import
their SDKs: 2.7 s of imports on the event loop of its first turn, while every other connection of
the process waited (the 3 to 4 s pauses of ``bench/deploy.py``'s continuations on a new worker).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SDKS = ("anthropic", "openai", "pydantic_ai.models.anthropic", "pydantic_ai.models.openai")


def _modules_after(code: str) -> list[str]:
    """The provider SDK modules loaded in a fresh interpreter after Django's set-up and ``code``."""
    script = (f"import django, json, sys\ndjango.setup()\n{code}\n"
              f"print(json.dumps(sorted(m for m in {SDKS!r} if m in sys.modules)))")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "thinkproject.settings_test", "PYTHONPATH": str(ROOT)}
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
