"""A threads-pool Celery worker runs its tasks' engine work on one event loop (docs/operations.md#workers).

Run in a fresh interpreter: ``use_one_loop`` holds for the rest of a process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, json, threading
import django
django.setup()
from agents_app.turns import control

async def where():
    # The loop itself, not its id: kept in the lists below, a finished loop's id is not reused.
    return asyncio.get_running_loop(), threading.current_thread().name, await control.channel_name()

async def fails():
    raise ValueError("from the loop")

before = [control.run_sync(where) for _ in range(2)]
control.use_one_loop()
after = []
threads = [threading.Thread(target=lambda: after.append(control.run_sync(where))) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
try:
    control.run_sync(fails)
    raised = None
except ValueError as exc:
    raised = str(exc)
print(json.dumps({
    "before_loops": len({id(loop) for loop, _, _ in before}),
    "after_loops": len({id(loop) for loop, _, _ in after}),
    "after_threads": sorted({name for _, name, _ in after}),
    "after_channels": len({channel for _, _, channel in after}),
    "raised": raised,
}))
"""


def test_one_loop_runs_every_call_on_one_loop_thread_and_keeps_its_control_channel() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "thinkproject.settings_test", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        # Without it, a loop per call (each ends with the call).
        "before_loops": 2,
        "after_loops": 1, "after_threads": ["agents-worker-loop"], "after_channels": 1,
        "raised": "from the loop",
    }
