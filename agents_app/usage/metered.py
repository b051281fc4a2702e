"""What a turn's model runs used, accumulated in memory while the turn runs (``TurnState.metered``).

``ChatAgent.stream_model_reply`` hands ``usage`` to pydantic-ai, which adds every request of
every step to it in place (a direct first step is added by hand: ``llm.direct``); the engine
stores it when the turn ends (``usage.service.record``).
"""

from dataclasses import dataclass, field

from pydantic_ai.usage import RunUsage


@dataclass
class Metered:
    usage: RunUsage = field(default_factory=RunUsage)
    # The model's name as its pydantic-ai ``Model`` reports it ("" until a model run starts).
    model: str = ""
    # The quota that refused the turn ("user per day", ...): the turn made no model request.
    limit: str = ""

    @property
    def worth_storing(self) -> bool:
        """A model ran, or a quota refused the turn: turns that never reach a model store nothing."""
        return bool(self.model or self.limit or self.usage.requests)
