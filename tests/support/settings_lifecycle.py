"""The live test settings plus the lifecycle test agents (``tests.lifecycle_agents``)."""

from tests.support.settings_live import *  # noqa: F403
from tests.support.settings_live import AGENT_CLASSES

AGENT_CLASSES = [*AGENT_CLASSES, "tests.lifecycle_agents.GreeterAgent"]
