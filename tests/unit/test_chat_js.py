"""The chat page's message builder (``static/agents_app/chat/message-builder.js``) against ``messages.py``.

The page builds a streaming reply itself and the server persists what ``MessageBuilder`` builds; if the
two differed, a reply would change when the page is reloaded. So the same chunk sequences go through
both: this test builds the expected message of each with the Python builder and hands them to Node's
test runner (``tests/js/message_builder.test.mjs``, no npm packages), which applies the chunks with the
JS builder and compares. The sequences are every reply of the golden frames (``tests/golden/frames``,
a continuation extending the previous reply as ``builder_for_reply`` does) and the hand-written ones of
``tests/js/chunk_sequences.json``, which cover every chunk type the builder handles.

Node is required (CI has it, as the conformance suite does): a missing ``node`` fails, never skips.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agents_app.messages import MessageBuilder, UIMessage, builder_for_reply, clone

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "frames"
JS_TESTS = ROOT / "tests" / "js"
SEQUENCES = JS_TESTS / "chunk_sequences.json"
NODE_TEST = JS_TESTS / "message_builder.test.mjs"
BUILDER_JS = ROOT / "agents_app" / "static" / "agents_app" / "chat" / "message-builder.js"
# The node test reads the cases from the file this variable names.
CASES_ENV = "CHAT_JS_PARITY_CASES"
RESPONSE = "cf_agent_use_chat_response"
NODE_TIMEOUT = 120
# Every chunk type MessageBuilder.apply handles (data-* stands for all data parts), and finish: it carries
# messageMetadata that the builder must not merge.
BUILDER_CHUNK_TYPES = {*MessageBuilder._CHUNK_HANDLERS, "data-*", "finish"}

Case = dict[str, Any]


def golden_cases() -> dict[str, Case]:
    """One case per reply of every golden fixture: ``<fixture>[/<tab>]/<request id>``."""
    cases: dict[str, Case] = {}
    for path in sorted(GOLDEN.glob("*.json")):
        data = json.loads(path.read_text())
        tabs = data.items() if isinstance(data, dict) else [("", data)]
        for tab, frames in tabs:
            prefix = f"golden/{path.stem}" + (f"/{tab}" if tab else "")
            for request_id, case in replies(frames, prefix).items():
                cases[f"{prefix}/{request_id}"] = case
    return cases


def replies(frames: list[dict[str, Any]], prefix: str) -> dict[str, Case]:
    """The chunks of each request id in ``frames`` and the message the Python builder makes of them.

    A reply goes into a local transcript when it starts, as the server stores it; transcript frames
    (``cf_agent_chat_messages``, ``cf_agent_message_updated``) update that transcript, so a continuation
    extends the reply as the server last stored it (an approval decided, a client tool answered).
    """
    transcript: list[UIMessage] = []
    builders: dict[str, MessageBuilder] = {}
    cases: dict[str, Case] = {}
    for frame in frames:
        kind = frame.get("type")
        if kind == "cf_agent_chat_messages":
            transcript = clone(frame["messages"])
        elif kind == "cf_agent_message_updated":
            updated = frame["message"]
            transcript = [clone(updated) if m.get("id") == updated.get("id") else m for m in transcript]
        elif kind == RESPONSE and not frame.get("done") and isinstance(frame.get("body"), dict):
            request_id, chunk = frame["id"], frame["body"]
            if request_id not in builders:
                case: Case = {"chunks": []}
                message_id = chunk.get("messageId") if chunk.get("type") == "start" else None
                message_id = message_id or f"{prefix}/{request_id}"
                builder = builder_for_reply(
                    transcript, continuation=bool(frame.get("continuation")), message_id=message_id
                )
                if builder.message == MessageBuilder.new(message_id).message:
                    case["messageId"] = message_id
                else:
                    case["base"] = clone(builder.message)
                builders[request_id], cases[request_id] = builder, case
                transcript = [m for m in transcript if m.get("id") != builder.message["id"]] + [builder.message]
            cases[request_id]["chunks"].append(chunk)
            builders[request_id].apply(chunk)
    for request_id, builder in builders.items():
        cases[request_id]["expected"] = clone(builder.message)
    return cases


def sequence_cases() -> dict[str, Case]:
    """The hand-written sequences, each from ``base`` (a reply to extend) or a new ``messageId``."""
    cases: dict[str, Case] = {}
    for name, sequence in json.loads(SEQUENCES.read_text()).items():
        base = sequence.get("base")
        builder = MessageBuilder(clone(base)) if base is not None else MessageBuilder.new(sequence["messageId"])
        for chunk in sequence["chunks"]:
            builder.apply(clone(chunk))
        cases[f"sequence/{name}"] = {**sequence, "expected": builder.message}
    return cases


def node() -> str:
    """The node executable; its absence fails the test, as skipping would hide a page that drifted."""
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not installed: the chat page's JS tests need Node.js 20 (node --test)")
    return path


def test_sequences_cover_every_chunk_type_of_the_builder() -> None:
    """A chunk type the Python builder learns must get a hand-written sequence here too."""
    seen = {
        "data-*" if str(chunk.get("type")).startswith("data-") else chunk.get("type")
        for sequence in json.loads(SEQUENCES.read_text()).values()
        for chunk in sequence["chunks"]
    }
    missing = BUILDER_CHUNK_TYPES - seen
    assert not missing, f"no sequence has: {sorted(missing)}"


def test_js_builder_has_the_same_table_of_handlers() -> None:
    """message-builder.js maps the same chunk types to the same handlers (camelCase), in the same order."""
    js = re.findall(r'^  \["([^"]+)", proto\.(\w+)\],$', BUILDER_JS.read_text(), re.MULTILINE)
    python = [(kind, _camel(handler.__name__)) for kind, handler in MessageBuilder._CHUNK_HANDLERS.items()]
    assert js == python


def _camel(name: str) -> str:
    """``_tool_input_start`` -> ``toolInputStart``."""
    first, *rest = name.lstrip("_").split("_")
    return first + "".join(word.capitalize() for word in rest)


def test_golden_replies_are_found() -> None:
    """Guards the walk over the fixtures: every fixture holds at least one reply, each with its chunks."""
    cases = golden_cases()
    fixtures = {path.stem for path in GOLDEN.glob("*.json")}
    assert {name.split("/")[1] for name in cases} == fixtures
    assert all(case["chunks"] and case["expected"]["parts"] for case in cases.values())
    # The round trips continue a reply: that case extends the stored message, not a new one.
    assert "base" in cases["golden/approval_round_trip/<id:3>"]


def test_js_builder_makes_the_messages_python_makes(tmp_path: Path) -> None:
    """Node applies each case's chunks with message-builder.js and compares with the Python message."""
    cases = {**golden_cases(), **sequence_cases()}
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases, ensure_ascii=False))
    result = subprocess.run(
        [node(), "--test", "--test-reporter=tap", str(NODE_TEST)],
        cwd=ROOT,
        env={**os.environ, CASES_ENV: str(cases_file)},
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT,
        check=False,
    )
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, f"node --test failed (exit {result.returncode}):\n{output}"
    # Each case ran as a node test of its own: without the cases file the parity suite would be skipped.
    assert _summary(output, "skipped") == 0, output
    assert _summary(output, "pass") >= len(cases), output


def _summary(tap: str, field: str) -> int:
    """A count from the TAP summary (``# pass 12``)."""
    match = re.search(rf"^# {field} (\d+)$", tap, re.MULTILINE)
    assert match, f"no '# {field}' line in node's output:\n{tap}"
    return int(match.group(1))
