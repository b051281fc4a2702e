"""What the ``emitted`` fixture (tests/conftest.py) records: events as (name, data), in order."""

from typing import Any

Events = list[tuple[str, dict[str, Any]]]


def names(emitted: Events) -> list[str]:
    """The names of the recorded events, in order."""
    return [name for name, _ in emitted]
