"""``DemoAgent``: a small agent with a server tool, shown on a fresh ``make run``."""

from agents_app import ChatAgent

WEATHER = {"paris": "sunny, 21°C", "oslo": "snow, -3°C", "lisbon": "clear, 18°C"}


def get_weather(city: str) -> str:
    """Current weather in a city (demo data)."""
    return f"{city}: {WEATHER.get(city.lower(), 'cloudy, 12°C')}"


class DemoAgent(ChatAgent):
    """Echoes with the offline demo model, and knows the (made-up) weather."""

    system_prompt = "You are the demo agent of Think for Django. Be brief."

    def get_tools(self) -> list[object]:
        return [get_weather]
