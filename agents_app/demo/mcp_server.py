"""The demo's MCP server: two tools, a resource and a prompt, over streamable HTTP, offline.

``make run`` starts it beside Daphne (``python -m agents_app.demo.mcp_server --port 8001``) and
exports ``DEMO_MCP_URL``, which makes ``DemoAgent`` declare it, so that the offline demo model's
``/tool convert_units {"value": 10, "from_unit": "km", "to_unit": "mi"}`` goes through a real MCP
connection (README "MCP servers"). Built with the official ``mcp`` SDK's server API; it imports
no Django, so it starts in a fraction of a second. The tools are pure and deterministic, which
lets the tests and ``bench/mcp.py`` compare their results with the same functions called in
process.
"""

import argparse
from typing import Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

# What DemoAgent names it (DEMO_MCP_SERVER): its id in cf_agent_mcp_servers.
NAME = "demo-tools"
DEFAULT_PORT = 8001
# Each unit: its dimension and its size in that dimension's base unit (metre, kilogram, litre).
UNITS: dict[str, tuple[str, float]] = {
    "m": ("length", 1.0),
    "km": ("length", 1000.0),
    "mi": ("length", 1609.344),
    "ft": ("length", 0.3048),
    "kg": ("mass", 1.0),
    "g": ("mass", 0.001),
    "lb": ("mass", 0.45359237),
    "l": ("volume", 1.0),
    "gal": ("volume", 3.785411784),
}
TEMPERATURES = ("c", "f")


def convert_units(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a value between units: m, km, mi, ft; kg, g, lb; l, gal; c and f (temperatures)."""
    source, target = from_unit.strip().lower(), to_unit.strip().lower()
    if source in TEMPERATURES and target in TEMPERATURES:
        converted = value if source == target else (value * 9 / 5 + 32 if source == "c" else (value - 32) * 5 / 9)
        return f"{value:g} {from_unit} = {converted:.4g} {to_unit}"
    if source not in UNITS or target not in UNITS:
        known = ", ".join([*UNITS, *TEMPERATURES])
        raise ToolError(f"Unknown unit {from_unit if source not in UNITS else to_unit!r}; known: {known}")
    (kind, size), (target_kind, target_size) = UNITS[source], UNITS[target]
    if kind != target_kind:
        raise ToolError(f"Cannot convert {kind} ({from_unit}) to {target_kind} ({to_unit})")
    return f"{value:g} {from_unit} = {value * size / target_size:.4g} {to_unit}"


def count_words(text: str) -> dict[str, int]:
    """Count the words, characters and lines of a text."""
    return {"words": len(text.split()), "characters": len(text), "lines": len(text.splitlines()) or 1}


LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


def build(log_level: LogLevel = "WARNING") -> MCPServer:
    """The demo server, with its tools, resource and prompt registered."""
    instructions = "Offline demo tools of Think for Django: unit conversion, word counts."
    server: MCPServer = MCPServer(NAME, instructions=instructions, version="1.0", log_level=log_level)
    server.add_tool(convert_units)
    server.add_tool(count_words)

    @server.resource("demo://units", name="units", description="The units convert_units knows", mime_type="text/plain")
    def units() -> str:
        return ", ".join([*UNITS, *TEMPERATURES])

    @server.prompt(name="convert", description="Ask the agent to convert a value")
    def convert(value: str, from_unit: str, to_unit: str) -> str:
        return f"Convert {value} {from_unit} to {to_unit} with convert_units."

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    args = parser.parse_args(argv)
    build(args.log_level).run("streamable-http", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
