"""``DemoAgent``: one tool of each kind, so a fresh ``make run`` shows them all.

With the offline demo model, name a tool to call it (``/tool NAME {json}`` or a word of its name):
``get_weather`` runs here; ``send_email`` waits for Approve / Reject; ``getBrowserInfo`` runs in
the browser; ``crunch_numbers`` reports progress while it works.
"""

import asyncio
from collections.abc import AsyncIterator

from pydantic_ai import RunContext

from agents_app import ChatAgent
from agents_app.tools import ClientTool, tool

WEATHER = {"paris": "sunny, 21°C", "oslo": "snow, -3°C", "lisbon": "clear, 18°C"}


def get_weather(city: str) -> str:
    """Current weather in a city (demo data)."""
    return f"{city}: {WEATHER.get(city.lower(), 'cloudy, 12°C')}"


def send_email(to: str, subject: str) -> str:
    """Send an email (demo: nothing is sent). Needs the user's approval."""
    return f"Email to {to} about {subject!r} sent (demo)."


async def crunch_numbers(ctx: RunContext["DemoAgent"], count: int = 5) -> AsyncIterator[dict[str, int]]:
    """Add the numbers 1..count slowly, reporting progress on the way."""
    total = 0
    for i in range(1, max(1, min(count, 50)) + 1):
        await asyncio.sleep(0.05)
        total += i
        await ctx.deps.write({"type": "data-progress", "id": "crunch", "data": {"done": i, "of": count}})
        yield {"done": i, "total": total}


class DemoAgent(ChatAgent):
    """Echoes with the offline demo model, and has a server, a client and an approval tool."""

    system_prompt = "You are the demo agent of Think for Django. Be brief."

    def get_tools(self) -> list[object]:
        return [
            get_weather,
            tool(send_email, needs_approval=True),
            crunch_numbers,
            ClientTool("getBrowserInfo", "The user's browser, language and time zone"),
        ]
