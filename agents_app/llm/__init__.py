"""The model layer: which pydantic-ai model a turn talks to (``get_model``) and the demo model."""

from .providers import get_model, is_demo, warm

__all__ = ["get_model", "is_demo", "warm"]
