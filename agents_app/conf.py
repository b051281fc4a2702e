"""Settings of the agents app, with their defaults (read at call time, so ``override_settings`` works).

Each default is documented here, in the style of ``django/conf/global_settings.py``. Projects set
any of them in ``settings.py``; the README's configuration table lists the environment variables
that ``thinkproject/settings.py`` maps onto them.
"""

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Import strings of the ChatAgent subclasses this site serves.
    "AGENT_CLASSES": [],
    # Model used by agents that do not override get_model(): "demo" or a pydantic-ai model string.
    "AGENT_MODEL": "demo",
    # Base URL and key for an OpenAI-compatible server (vLLM, LM Studio, llama.cpp, a proxy).
    "AGENT_MODEL_BASE_URL": None,
    "AGENT_MODEL_API_KEY": None,
    # Delay between words of the offline demo model, in milliseconds (makes streaming visible).
    "AGENT_DEMO_DELAY_MS": 15,
    # Largest client frame accepted, in bytes (default 4 MiB). Bigger frames get an error frame.
    "AGENT_MAX_FRAME_BYTES": 4 * 1024 * 1024,
    # Largest number of model requests in one turn (tool loops), as pydantic-ai's request limit.
    "AGENT_MAX_STEPS": 10,
}


def get(name: str) -> Any:
    """The value of an ``AGENT_*`` setting, or its documented default."""
    return getattr(settings, name, DEFAULTS[name])
