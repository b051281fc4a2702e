"""A message's parts are validated each against its own kind's model (``ui_messages._validate``),
which must give what pydantic-ai's union of every part model gives, for every kind and state."""

from typing import Any

import pytest
from pydantic import ValidationError

from agents_app.llm import ui_messages

TOOL_STATES: dict[str, dict[str, Any]] = {
    "input-streaming": {"input": {"city": "Os"}},
    "input-available": {"input": {"city": "Oslo"}},
    "output-available": {"input": {"city": "Oslo"}, "output": {"forecast": "rain"}},
    "output-error": {"input": {"city": "Oslo"}, "errorText": "no such city"},
    "approval-requested": {"input": {"city": "Oslo"}, "approval": {"id": "ap1"}},
    "approval-responded": {"input": {"city": "Oslo"}, "approval": {"id": "ap1", "approved": True, "reason": "ok"}},
    "output-denied": {"input": {"city": "Oslo"}, "approval": {"id": "ap1", "approved": False}},
}

PARTS: list[dict[str, Any]] = [
    {"type": "text", "text": "hello", "state": "done"},
    {"type": "text", "text": "plain"},
    {"type": "reasoning", "text": "thinking", "state": "done", "providerMetadata": {"x": {"signature": "s"}}},
    {"type": "step-start"},
    {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,AAAA", "filename": "a.png"},
    {"type": "source-url", "sourceId": "s1", "url": "https://example.com", "title": "Example"},
    {"type": "source-document", "sourceId": "s2", "mediaType": "text/plain", "title": "Doc"},
    {"type": "data-weather", "id": "d1", "data": {"temperature": 3}},
    *({"type": "tool-get_weather", "toolCallId": f"call-{state}", "state": state, **fields}
      for state, fields in TOOL_STATES.items()),
    *({"type": "dynamic-tool", "toolName": "get_weather", "toolCallId": f"dyn-{state}", "state": state, **fields}
      for state, fields in TOOL_STATES.items()),
    # A field pydantic-ai does not declare (Cloudflare's ``toolName`` on a static tool part): projected away.
    {"type": "tool-get_weather", "toolName": "get_weather", "toolCallId": "c9", "state": "input-available",
     "input": {}},
]


def _union(message: dict[str, Any]) -> Any:
    """What validating against pydantic-ai's ``UIMessage`` gives, every part against the union."""
    return ui_messages._MESSAGE.validate_python(ui_messages._project_message(message))


@pytest.mark.parametrize("part", PARTS, ids=lambda part: f"{part['type']}:{part.get('state', '')}")
def test_a_part_validated_against_its_own_model_is_what_the_union_gives(part: dict[str, Any]) -> None:
    message = {"id": "m1", "role": "assistant", "parts": [{"type": "step-start"}, part], "metadata": {"k": 1}}
    mine, union = ui_messages._validate(message), _union(message)
    assert mine == union
    assert [type(p) for p in mine.parts] == [type(p) for p in union.parts]
    assert ui_messages._part_model(part) is type(mine.parts[1])  # the path taken was its own model's


def test_every_part_kind_pydantic_ai_knows_is_covered() -> None:
    covered = {type(ui_messages._validate({"id": "m", "role": "assistant", "parts": [part]}).parts[0])
               for part in PARTS}
    assert covered == set(ui_messages._PART_MODELS.values())


@pytest.mark.parametrize("parts", [
    [{"type": "text", "text": 5}],  # refused by its own model
    [{"type": "nope"}],  # no model of that kind
    [{"type": "text", "text": "fine"}, "not a part"],
    "not a list",
], ids=["refused", "unknown kind", "not a dict", "not a list"])
def test_a_message_its_parts_models_refuse_gets_the_unions_verdict(parts: Any) -> None:
    message = {"id": "m1", "role": "user", "parts": parts}
    with pytest.raises(ValidationError) as mine:
        ui_messages._validate(message)
    with pytest.raises(ValidationError) as union:
        _union(message)
    assert mine.value.errors(include_url=False) == union.value.errors(include_url=False)
