"""What is stored of a message: provider leftovers removed, and a row-size guard.

Every message goes through ``prepare_for_storage`` before it is written (``transcript``):
``sanitize_message`` (provider leftovers), the agent's ``sanitize_message_for_persistence`` hook,
then ``enforce_row_size_limit``: a message above ``ROW_MAX_BYTES`` of JSON has its large tool
outputs compacted, keeping their structure (``truncate_tool_output``), then, oldest first, its long
text parts replaced by a note, until it fits (docs/architecture.md#transcript-storage has the
rules). Pure: ports of the reference's message sanitizer and tool-output truncation (same markers,
same thresholds), so a transcript compacts here as it would on Cloudflare.
"""

import json
from collections.abc import Callable
from typing import Any, Final

from .messages import UIMessage, is_tool_part, tool_name
from .protocol import codec

# Largest JSON of a stored message, in UTF-8 bytes (the reference's ROW_MAX_BYTES: headroom under 2 MB).
ROW_MAX_BYTES: Final = 1_800_000
# Tool outputs longer than this (JSON characters) are compacted when a message is too large.
TOOL_OUTPUT_COMPACT_CHARS: Final = 1_000
# Text parts longer than this are truncated, oldest first, when compacting outputs was not enough.
TEXT_COMPACT_CHARS: Final = 1_000
# What a truncated text part keeps of its text.
TEXT_KEEP_CHARS: Final = 500
# Longest string kept in the input/output of a provider-executed tool part.
PROVIDER_TOOL_MAX_STRING_LENGTH: Final = 500
# Provider tools whose payloads are replayed on later turns, so never cut.
PROVIDER_TOOLS_KEPT_WHOLE: Final = frozenset({"web_search", "web_fetch"})
# Keys of opaque replay tokens inside provider tool payloads: kept verbatim.
OPAQUE_KEY_PREFIX: Final = "encrypted"
# Nesting kept by truncate_tool_output before a subtree is replaced by a marker.
TRUNCATE_MAX_DEPTH: Final = 8
_TRUNCATED_FLAG: Final = "__truncated"
_TRUNCATED_CHARS: Final = "__truncatedChars"


def prepare_for_storage(message: UIMessage, hook: Callable[[UIMessage], UIMessage] | None = None) -> UIMessage:
    """The message as it is stored: sanitized, passed through ``hook``, within the row size."""
    prepared = sanitize_message(message)
    if hook is not None:
        prepared = hook(prepared)
    return enforce_row_size_limit(prepared)


# ------------------------------------------------------------------------------------ sanitize
def sanitize_message(message: UIMessage) -> UIMessage:
    parts = [_truncate_provider_payloads(_strip_openai(part)) for part in message.get("parts", [])]
    kept = [part for part in parts if not _empty_reasoning(part)]
    if kept == message.get("parts", []):
        return message
    return {**message, "parts": kept}


def _strip_openai(part: dict[str, Any]) -> dict[str, Any]:
    for key in ("providerMetadata", "callProviderMetadata"):
        metadata = part.get(key)
        if not isinstance(metadata, dict) or not isinstance(metadata.get("openai"), dict):
            continue
        openai = {k: v for k, v in metadata["openai"].items() if k not in ("itemId", "reasoningEncryptedContent")}
        rest = {k: v for k, v in metadata.items() if k != "openai"}
        if openai:
            rest["openai"] = openai
        part = {k: v for k, v in part.items() if k != key}
        if rest:
            part[key] = rest
    return part


def _empty_reasoning(part: dict[str, Any]) -> bool:
    if part.get("type") != "reasoning" or str(part.get("text") or "").strip():
        return False
    metadata = part.get("providerMetadata")
    return not (isinstance(metadata, dict) and metadata)


def _truncate_provider_payloads(part: dict[str, Any]) -> dict[str, Any]:
    if not part.get("providerExecuted") or not is_tool_part(part) or tool_name(part) in PROVIDER_TOOLS_KEPT_WHOLE:
        return part
    cut = dict(part)
    for key in ("input", "output"):
        if key in cut:
            cut[key] = _truncate_long_strings(cut[key], keep=False)
    return cut


def _truncate_long_strings(value: Any, *, keep: bool) -> Any:
    if isinstance(value, str):
        if keep or len(value) <= PROVIDER_TOOL_MAX_STRING_LENGTH:
            return value
        marker = f"… [truncated, original length: {len(value)}]"
        return value[: max(0, PROVIDER_TOOL_MAX_STRING_LENGTH - len(marker))] + marker
    if isinstance(value, list):
        return [_truncate_long_strings(item, keep=keep) for item in value]
    if isinstance(value, dict):
        return {k: _truncate_long_strings(v, keep=keep or str(k).startswith(OPAQUE_KEY_PREFIX))
                for k, v in value.items()}
    return value


# ------------------------------------------------------------------------------- row size
def _json(value: Any) -> str:
    """JSON as ``JSON.stringify`` writes it (no spaces, characters as they are)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def byte_length(message: UIMessage) -> int:
    """The message's size as a row stores it: its JSON in UTF-8 (``protocol.codec``, as written)."""
    return len(codec.encoded(message))


def enforce_row_size_limit(message: UIMessage) -> UIMessage:
    """``message`` itself when it fits in ``ROW_MAX_BYTES``; else a compacted copy (module docstring)."""
    if byte_length(message) <= ROW_MAX_BYTES:
        return message
    if message.get("role") != "assistant":
        return _truncate_text_parts(message)
    compacted: list[str] = []
    parts = []
    for part in message.get("parts", []):
        if "toolCallId" in part and part.get("state") == "output-available" and "output" in part:
            output, truncated = truncate_tool_output(part["output"], TOOL_OUTPUT_COMPACT_CHARS)
            if truncated:
                compacted.append(part["toolCallId"])
                part = {**part, "output": output}
        parts.append(part)
    result = {**message, "parts": parts}
    if compacted:
        result["metadata"] = {**(message.get("metadata") or {}), "compactedToolOutputs": compacted}
    if byte_length(result) <= ROW_MAX_BYTES:
        return result
    return _truncate_text_parts(result)


def _truncate_text_parts(message: UIMessage) -> UIMessage:
    parts = list(message.get("parts", []))
    truncated: list[int] = []
    for index, part in enumerate(parts):
        text = part.get("text")
        if part.get("type") != "text" or not isinstance(text, str) or len(text) <= TEXT_COMPACT_CHARS:
            continue
        truncated.append(index)
        parts[index] = {**part, "text": (f"[Text truncated for storage ({len(text)} chars). "
                                         f"First {TEXT_KEEP_CHARS} chars: {text[:TEXT_KEEP_CHARS]}...]")}
        if byte_length({**message, "parts": parts}) <= ROW_MAX_BYTES:
            break
    result = {**message, "parts": parts}
    if truncated:
        result["metadata"] = {**(message.get("metadata") or {}), "compactedTextParts": truncated}
    return result


# ------------------------------------------------------------------- tool output truncation
def truncate_tool_output(output: Any, max_chars: int) -> tuple[Any, bool]:
    """``output`` cut to about ``max_chars`` of JSON, keeping its shape; (value, whether it was cut)."""
    original = _length_text(output)
    if len(original) <= max_chars:
        return output, False
    return _truncate_value(output, max_chars, len(original), 0), True


def _suffix(original_length: int) -> str:
    return f"... [truncated {original_length} chars]"


def _length_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return _json(value)
    except (TypeError, ValueError):
        return str(value)


def _truncate_value(value: Any, max_chars: int, original_length: int, depth: int) -> Any:
    if isinstance(value, str):
        return _truncate_string(value, max_chars, len(value))
    if not isinstance(value, list | dict):
        return value
    if depth >= TRUNCATE_MAX_DEPTH:
        return f"[Nested output omitted {_suffix(original_length)}]"
    if isinstance(value, list):
        return _truncate_list(value, max_chars, original_length, depth)
    return _truncate_dict(value, max_chars, original_length, depth)


def _child_budget(max_chars: int, children: int) -> int:
    return max_chars if children <= 1 else max(80, max_chars // min(children, 10))


def _truncate_list(value: list[Any], max_chars: int, original_length: int, depth: int) -> list[Any]:
    budget = _child_budget(max_chars, len(value))
    result = [_truncate_value(item, budget, len(_length_text(item)), depth + 1) for item in value]
    # Drop items from the end until the list fits; its JSON length is kept as a running total
    # ("[" + items joined by "," + "]") rather than re-serialised per item (a long list is common).
    lengths = [len(_json(item)) for item in result]
    total = 2 + sum(lengths) + max(0, len(lengths) - 1)
    while len(result) > 1 and total > max_chars:
        result.pop()
        total -= lengths.pop() + 1
    if len(result) < len(value):
        result.append(f"Array output truncated {_suffix(original_length)}")
    if len(_length_text(result)) > max_chars:
        return _list_marker(max_chars, original_length)
    return result


def _truncate_dict(value: dict[str, Any], max_chars: int, original_length: int, depth: int) -> dict[str, Any]:
    budget = _child_budget(max_chars, len(value))
    result = {key: _truncate_value(item, budget, len(_length_text(item)), depth + 1) for key, item in value.items()}
    length = len(_length_text(result))
    if length <= max_chars:
        return result
    _shrink_strings(result, max_chars)
    if len(_length_text(result)) > max_chars:
        result[_TRUNCATED_FLAG] = True
        result[_TRUNCATED_CHARS] = length
    if len(_length_text(result)) > max_chars:
        return _dict_marker(max_chars, original_length)
    return result


def _shrink_strings(value: dict[str, Any], max_chars: int) -> None:
    """Cut the longest string fields first until the object fits (its JSON length kept as a running total)."""
    total = len(_json(value))
    strings = sorted(((k, v) for k, v in value.items() if isinstance(v, str)), key=lambda kv: -len(kv[1]))
    for key, text in strings:
        if total <= max_chars:
            return
        value[key] = _truncate_string(text, max(0, max_chars // 4), len(text))
        total += len(_json(value[key])) - len(_json(text))


def _truncate_string(value: str, max_chars: int, original_length: int) -> str:
    if len(value) <= max_chars:
        return value
    suffix = _suffix(original_length)
    if max_chars <= len(suffix):
        return suffix[:max_chars]
    return value[: max_chars - len(suffix)] + suffix


def _dict_marker(max_chars: int, original_length: int) -> dict[str, Any]:
    marker = {_TRUNCATED_FLAG: True, _TRUNCATED_CHARS: original_length,
              "note": "Tool output omitted because it was too large to preserve structurally."}
    return marker if len(_length_text(marker)) <= max_chars else {_TRUNCATED_FLAG: True,
                                                                   _TRUNCATED_CHARS: original_length}


def _list_marker(max_chars: int, original_length: int) -> list[Any]:
    structured = _dict_marker(max_chars, original_length)
    if len(_length_text([structured])) <= max_chars:
        return [structured]
    marker = [f"Array output omitted because it was too large to preserve structurally {_suffix(original_length)}"]
    if len(_length_text(marker)) <= max_chars:
        return marker
    return [_suffix(original_length)[:max_chars]]
