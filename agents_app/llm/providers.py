"""``AGENT_MODEL`` → a pydantic-ai model.

Accepted values: ``demo`` (default, the offline demo model, ``llm/demo.py``); any pydantic-ai
model string (``openai-chat:gpt-4o``, ``openai:gpt-5.2`` for the Responses API,
``anthropic:claude-sonnet-4-5``), with keys from the provider's usual environment variable;
``ollama:<model>`` for a local Ollama server (``OLLAMA_BASE_URL``, default
``http://127.0.0.1:11434/v1``); ``openai-compatible:<model>`` with ``AGENT_MODEL_BASE_URL`` (and
``AGENT_MODEL_API_KEY`` if needed) for any OpenAI chat completions server (vLLM, LM Studio,
llama.cpp). ``AGENT_MODEL_BASE_URL`` also redirects ``openai-chat:``, ``openai:``/``openai-responses:``
(Responses API) and ``anthropic:`` models (a gateway, a proxy, or the tests' local servers); it is
the base URL the provider's SDK takes (``.../v1`` for OpenAI, the host alone for Anthropic), and
``AGENT_MODEL_API_KEY`` then overrides the provider's usual key.
"""

import contextlib
import os
from collections.abc import Iterable

from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.function import FunctionModel

from .. import conf
from ..errors import AgentConfigurationError
from .demo import MODEL_NAME, build_demo_model

DEMO = "demo"
# Providers whose models ``AGENT_MODEL_BASE_URL`` points elsewhere (besides ``openai-chat:``).
REDIRECTABLE = ("openai", "openai-responses", "anthropic")
OLLAMA_DEFAULT_URL = "http://127.0.0.1:11434/v1"


def get_model(spec: str | None = None) -> Model:
    """The model for ``spec`` (default: the ``AGENT_MODEL`` setting).

    Raises:
        AgentConfigurationError: the string names no known provider, or its provider cannot be
            built (a missing key, a missing extra).
    """
    spec = spec or conf.get("AGENT_MODEL")
    if spec == DEMO:
        return build_demo_model(delay=conf.get("AGENT_DEMO_DELAY_MS") / 1000)
    provider, _, name = spec.partition(":")
    base_url = conf.get("AGENT_MODEL_BASE_URL")
    try:
        if provider == "openai-compatible" or (provider == "openai-chat" and base_url):
            return _openai_compatible(name, base_url)
        if base_url and provider in REDIRECTABLE:
            return _redirected(provider, name, base_url)
        if provider == "ollama":
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.ollama import OllamaProvider

            url = os.environ.get("OLLAMA_BASE_URL", OLLAMA_DEFAULT_URL)
            return OpenAIChatModel(name, provider=OllamaProvider(base_url=url))
        return infer_model(spec)
    except AgentConfigurationError:
        raise
    except Exception as exc:
        raise AgentConfigurationError(f"AGENT_MODEL {spec!r} cannot be used: {exc}") from exc


def warm(specs: Iterable[str | None]) -> None:
    """Build each model once and drop it, at a process's start: its provider's SDK is imported then
    (Anthropic's and OpenAI's take seconds), not on the event loop of the first turn while other
    connections stream. A model that cannot be built is left to the first turn, which says why."""
    for spec in dict.fromkeys(spec or conf.get("AGENT_MODEL") for spec in specs):
        with contextlib.suppress(AgentConfigurationError):
            get_model(spec)


def _openai_compatible(name: str, base_url: str | None) -> Model:
    if not base_url:
        raise AgentConfigurationError("AGENT_MODEL 'openai-compatible:<model>' needs AGENT_MODEL_BASE_URL")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    api_key = conf.get("AGENT_MODEL_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url, api_key=api_key))


def _redirected(provider: str, name: str, base_url: str) -> Model:
    """An ``anthropic:`` or Responses API model talking to ``base_url``, with its usual key unless overridden."""
    key = conf.get("AGENT_MODEL_API_KEY")
    if provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel(name, provider=AnthropicProvider(base_url=base_url, api_key=key))
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    return OpenAIResponsesModel(name, provider=OpenAIProvider(base_url=base_url, api_key=key))


def is_demo(model: Model) -> bool:
    """True for the offline demo model: the chat page labels it so nobody mistakes it for an LLM."""
    return isinstance(model, FunctionModel) and model.model_name == MODEL_NAME
