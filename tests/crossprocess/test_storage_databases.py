"""The storage guards write the same rows on SQLite and PostgreSQL (docs/architecture.md#transcript-storage).

A script process (the production settings on a migrated database of each kind) stores through
``transcript`` what the in-process tests store through turns: a transcript trimmed to
``max_messages`` in batched deletes, a message above the row limit compacted, a merged run of
user messages; it reads the rows back and prints what it found.
"""

from pathlib import Path
from typing import Any

import pytest

from tests.support.live import LiveStack, ScriptProcess, database_url

pytestmark = pytest.mark.crossprocess

SCRIPT = r"""
import json
import django
django.setup()

from agents_app import transcript
from agents_app.models import AgentInstance, ChatMessage
from agents_app.sanitize import byte_length

def user(i):
    return {"id": f"u{i}", "role": "user", "parts": [{"type": "text", "text": f"m{i}"}]}

report = {}
bounded = AgentInstance.objects.create(slug="demo-agent", name="bounded")
transcript.persist(bounded, [user(i) for i in range(250)], policy=transcript.Policy(max_messages=10))
report["kept"] = [m["id"] for m in transcript.load(bounded)]

huge = AgentInstance.objects.create(slug="demo-agent", name="huge")
output = {"rows": [{"id": i, "name": "n" * 200} for i in range(12000)]}
message = {"id": "a1", "role": "assistant", "parts": [
    {"type": "tool-report", "toolCallId": "c1", "state": "output-available", "input": {}, "output": output}]}
returned = transcript.save_message(huge, message)
row = ChatMessage.objects.get(instance=huge, message_id="a1").data
report["huge"] = {"same": row == returned, "bytes": byte_length(row), "metadata": row.get("metadata")}

merged = AgentInstance.objects.create(slug="demo-agent", name="merged")
transcript.persist(merged, [user(1), {"id": "a", "role": "assistant", "parts": []}, user(2), user(3), user(4)])
before = AgentInstance.objects.get(pk=merged.pk).updated_at
transcript.merge_user_run(merged, 2)
report["merged"] = transcript.load(merged)
# A writer of the transcript: it takes the instance's row first (``touch``), as every one does.
report["merge_touched"] = AgentInstance.objects.get(pk=merged.pk).updated_at > before
print(json.dumps(report), flush=True)
"""


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.requires_postgres)])
def test_storage_guards_on_each_database(database: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = database_url(request, database, tmp_path, "storage")
    stack = LiveStack(tmp_path, "redis://127.0.0.1:9/0", url, extra_env={"CHANNEL_LAYER": "memory"})
    script = ScriptProcess(SCRIPT, stack.env, tmp_path / "script.log")
    report: dict[str, Any] = script.receive(timeout=120)
    assert report["kept"] == [f"u{i}" for i in range(240, 250)]
    huge = report["huge"]
    assert (huge["same"], huge["metadata"]) == (True, {"compactedToolOutputs": ["c1"]})
    assert huge["bytes"] <= 1_800_000
    texts = [(m["id"], m["parts"]) for m in report["merged"]]
    assert texts == [("u1", [{"type": "text", "text": "m1"}]), ("a", []),
                     ("u4", [{"type": "text", "text": "m2\n\nm3\n\nm4"}])]
    assert report["merge_touched"] is True
