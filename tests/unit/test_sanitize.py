"""What is stored of a message (``agents_app.sanitize``): the reference's sanitizer and row-size guard.

Pure: messages in, messages out (docs/architecture.md#transcript-storage; the reference's ``sanitize.ts``
and ``tool-output-truncation.ts``; their tests: ``row-size-guard.test.ts``).
"""

import json
from typing import Any

import pytest

from agents_app.messages import merge_user_messages
from agents_app.sanitize import (
    ROW_MAX_BYTES,
    byte_length,
    enforce_row_size_limit,
    prepare_for_storage,
    sanitize_message,
    truncate_tool_output,
)


def message(role: str, *parts: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "m1", "role": role, "parts": list(parts), **extra}


def tool(output: Any, call: str = "c1", **extra: Any) -> dict[str, Any]:
    return {"type": "tool-lookup", "toolCallId": call, "state": "output-available", "input": {}, "output": output,
            **extra}


# ----------------------------------------------------------------------------------- sanitizer
def test_openai_ephemeral_metadata_is_stripped_and_the_rest_kept() -> None:
    part = {"type": "text", "text": "hi", "providerMetadata": {
        "openai": {"itemId": "it_1", "reasoningEncryptedContent": "x", "keep": 1}, "other": {"a": 1}}}
    call = {**tool("out"), "callProviderMetadata": {"openai": {"itemId": "it_2"}}}
    stored = sanitize_message(message("assistant", part, call))
    assert stored["parts"][0]["providerMetadata"] == {"other": {"a": 1}, "openai": {"keep": 1}}
    assert "callProviderMetadata" not in stored["parts"][1]


@pytest.mark.parametrize(("part", "kept"), [
    ({"type": "reasoning", "text": ""}, False),
    ({"type": "reasoning", "text": "  "}, False),
    ({"type": "reasoning", "text": "", "providerMetadata": {"openai": {"itemId": "x"}}}, False),
    ({"type": "reasoning", "text": "", "providerMetadata": {"anthropic": {"redactedData": "r"}}}, True),
    ({"type": "reasoning", "text": "thinking"}, True),
], ids=["empty", "blank", "only-ephemeral-metadata", "redacted-thinking", "text"])
def test_empty_reasoning_parts_are_dropped_unless_they_carry_provider_data(part: dict[str, Any], kept: bool) -> None:
    assert (len(sanitize_message(message("assistant", part))["parts"]) == 1) is kept


def test_provider_executed_tool_payloads_are_cut_except_web_tools_and_opaque_tokens() -> None:
    long = "x" * 2000
    executed = {"type": "tool-code_execution", "toolCallId": "c1", "state": "output-available",
                "providerExecuted": True, "input": {"code": long},
                "output": {"stdout": long, "encrypted_content": long, "items": [long]}}
    web = {**executed, "type": "tool-web_search", "toolCallId": "c2"}
    local = {**executed, "providerExecuted": False, "toolCallId": "c3"}
    cut, kept, untouched = sanitize_message(message("assistant", executed, web, local))["parts"]
    assert len(cut["input"]["code"]) == 500
    assert cut["input"]["code"].endswith("… [truncated, original length: 2000]")
    assert len(cut["output"]["stdout"]) == 500
    assert len(cut["output"]["items"][0]) == 500
    assert cut["output"]["encrypted_content"] == long
    assert kept == web
    assert untouched == local
    assert sanitize_message(message("assistant", cut)) == message("assistant", cut)


def test_a_clean_message_is_returned_as_is() -> None:
    clean = message("user", {"type": "text", "text": "hi"})
    assert sanitize_message(clean) is clean


def test_the_agent_hook_runs_after_the_built_in_sanitizer() -> None:
    seen: list[dict[str, Any]] = []

    def hook(m: dict[str, Any]) -> dict[str, Any]:
        seen.append(m)
        return {**m, "parts": [{"type": "text", "text": "[redacted]"}]}

    raw = message("user", {"type": "reasoning", "text": ""}, {"type": "text", "text": "x"})
    stored = prepare_for_storage(raw, hook)
    assert seen[0]["parts"] == [{"type": "text", "text": "x"}]
    assert stored["parts"] == [{"type": "text", "text": "[redacted]"}]


# ------------------------------------------------------------------------------- row-size guard
def test_a_message_below_the_limit_is_unchanged() -> None:
    small = message("assistant", tool("y" * 10_000))
    assert enforce_row_size_limit(small) is small


def test_an_assistant_message_over_the_limit_has_its_tool_outputs_compacted_structurally() -> None:
    huge = message("assistant", {"type": "text", "text": "summary"},
                   tool({"rows": [{"id": i, "name": "n" * 200} for i in range(12_000)], "total": 12_000}),
                   tool("small", call="c2"))
    assert byte_length(huge) > ROW_MAX_BYTES
    stored = enforce_row_size_limit(huge)
    assert byte_length(stored) <= ROW_MAX_BYTES
    assert stored["metadata"] == {"compactedToolOutputs": ["c1"]}
    output = stored["parts"][1]["output"]
    assert isinstance(output, dict) and len(json.dumps(output, separators=(",", ":"))) <= 1_000
    assert stored["parts"][0] == huge["parts"][0]
    assert stored["parts"][2] == huge["parts"][2]


def test_text_is_truncated_oldest_first_when_compacting_outputs_is_not_enough() -> None:
    texts = [{"type": "text", "text": f"{i}" + "t" * 700_000} for i in range(4)]
    big = message("assistant", *texts, metadata={"finishReason": "stop"})
    stored = enforce_row_size_limit(big)
    assert byte_length(stored) <= ROW_MAX_BYTES
    assert stored["metadata"] == {"finishReason": "stop", "compactedTextParts": [0, 1]}
    assert stored["parts"][0]["text"].startswith("[Text truncated for storage (700001 chars). First 500 chars: 0ttt")
    assert stored["parts"][0]["text"].endswith("...]")
    assert stored["parts"][2:] == texts[2:]


def test_a_large_user_message_takes_the_text_truncation_path() -> None:
    big = message("user", {"type": "text", "text": "u" * 2_000_000})
    stored = enforce_row_size_limit(big)
    assert stored["metadata"] == {"compactedTextParts": [0]}
    assert byte_length(stored) <= ROW_MAX_BYTES


def test_size_is_measured_in_utf8_bytes() -> None:
    # 700k three-byte characters: 2.1 MB of UTF-8, though only 700k characters.
    wide = message("user", {"type": "text", "text": "€" * 700_000})
    assert len(json.dumps(wide, ensure_ascii=False)) < ROW_MAX_BYTES < byte_length(wide)
    assert enforce_row_size_limit(wide)["metadata"] == {"compactedTextParts": [0]}


# -------------------------------------------------------------------- tool output truncation
def test_truncate_tool_output_leaves_small_outputs_alone() -> None:
    assert truncate_tool_output({"a": 1}, 1_000) == ({"a": 1}, False)


def test_truncate_tool_output_keeps_a_string_prefix_with_the_marker() -> None:
    output, truncated = truncate_tool_output("s" * 5_000, 100)
    assert truncated and len(output) == 100 and output.endswith("... [truncated 5000 chars]")


def test_truncate_tool_output_drops_array_items_and_says_so() -> None:
    rows = [{"n": i, "pad": "p" * 50} for i in range(100)]
    output, _ = truncate_tool_output(rows, 1_000)
    assert output[-1] == f"Array output truncated ... [truncated {len(json.dumps(rows, separators=(',', ':')))} chars]"
    assert output[:-1] == rows[:len(output) - 1]
    assert len(json.dumps(output, separators=(",", ":"))) <= 1_000


def test_truncate_tool_output_shrinks_long_fields_and_flags_the_object() -> None:
    output, _ = truncate_tool_output({"title": "t", "body": "b" * 5_000, "notes": "n" * 3_000}, 1_000)
    assert output["title"] == "t"
    assert output["body"].endswith("... [truncated 5000 chars]")
    assert len(json.dumps(output, separators=(",", ":"))) <= 1_000


def test_truncate_tool_output_replaces_deep_nesting_by_a_marker() -> None:
    deep: Any = "x" * 2_000
    for _ in range(12):
        deep = {"d": deep}
    output, truncated = truncate_tool_output(deep, 1_000)
    assert truncated
    inner = output
    for _ in range(8):
        inner = inner["d"]
    assert inner.startswith("[Nested output omitted ... [truncated ")


# ------------------------------------------------------------------------------------- merge
def test_merge_joins_overlapping_user_texts_with_a_blank_line_and_keeps_the_last_id() -> None:
    second = {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "Second"}]}
    third = {"id": "u3", "role": "user", "metadata": {"m": 1},
             "parts": [{"type": "text", "text": "Third"}, {"type": "file", "url": "f"}]}
    assert merge_user_messages([second, third]) == {
        "id": "u3", "role": "user", "metadata": {"m": 1},
        "parts": [{"type": "text", "text": "Second\n\nThird"}, {"type": "file", "url": "f"}],
    }
