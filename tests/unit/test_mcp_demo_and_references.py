"""The demo MCP server's tools as functions, and the header references the admin and the API read.

The tools are what ``make run``'s demo MCP server offers (``agents_app/demo/mcp_server.py``); the
live tests call them through a real MCP session. Here, their arithmetic against the units'
definitions, and the errors the model gets.
"""

import re

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from agents_app.demo.mcp_server import build, convert_units, count_words
from agents_app.mcp.serializers import header_reference, reference_text

# Definitions: the international mile and pound, the US gallon.
MILE_M = 1609.344
POUND_KG = 0.45359237
GALLON_L = 3.785411784


@pytest.mark.parametrize(("value", "source", "target", "expected"), [
    (10, "km", "mi", 10_000 / MILE_M),
    (1, "mi", "ft", MILE_M / 0.3048),
    (2, "lb", "g", 2 * POUND_KG * 1000),
    (1, "gal", "l", GALLON_L),
    (100, "C", "F", 212),
    (-40, "f", "c", -40),
    (5, "kg", "kg", 5),
])
def test_convert_units_follows_the_definitions(value: float, source: str, target: str, expected: float) -> None:
    assert convert_units(value, source, target) == f"{value:g} {source} = {expected:.4g} {target}"


@pytest.mark.parametrize(("source", "target", "message"), [
    ("km", "kg", "Cannot convert length (km) to mass (kg)"),
    ("parsec", "km", "Unknown unit 'parsec'"),
    ("km", "furlong", "Unknown unit 'furlong'"),
])
def test_convert_units_refuses_what_it_cannot_convert(source: str, target: str, message: str) -> None:
    with pytest.raises(ToolError, match=re.escape(message)):
        convert_units(1, source, target)


def test_count_words() -> None:
    assert count_words("one two\nthree") == {"words": 3, "characters": 13, "lines": 2}
    assert count_words("") == {"words": 0, "characters": 0, "lines": 1}


async def test_the_server_offers_its_tools_resource_and_prompt() -> None:
    server = build()
    assert sorted(tool.name for tool in await server.list_tools()) == ["convert_units", "count_words"]
    assert [str(resource.uri) for resource in await server.list_resources()] == ["demo://units"]
    assert [prompt.name for prompt in await server.list_prompts()] == ["convert"]


@pytest.mark.parametrize(("text", "reference"), [
    ("env:DOCS_TOKEN", {"source": "env", "name": "DOCS_TOKEN", "prefix": ""}),
    ("Bearer env:DOCS_TOKEN", {"source": "env", "name": "DOCS_TOKEN", "prefix": "Bearer "}),
    ("  setting:MCP_KEY ", {"source": "setting", "name": "MCP_KEY", "prefix": ""}),
    ("Token abc setting:K", {"source": "setting", "name": "K", "prefix": "Token abc "}),
])
def test_a_header_reference_reads_back_as_written(text: str, reference: dict[str, str]) -> None:
    assert header_reference(text) == reference
    assert reference_text(reference) == text.strip()


@pytest.mark.parametrize("text", ["s3cret", "Bearer s3cret", "env:", "vault:TOKEN", "env:9LIVES", "env:A B"])
def test_a_plain_value_is_not_a_reference(text: str) -> None:
    with pytest.raises(ValueError, match="is not a reference"):
        header_reference(text)
