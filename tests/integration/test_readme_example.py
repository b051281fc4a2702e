"""The README's agent example runs as written (a doc that runs stays true)."""

import re
import sys
import types
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from tests.support.frames import chat_request, is_done, receive_until, text_of, user_message

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture
def readme_agents():
    """The first Python block of "Writing an agent", importable as module ``readme_agents``."""
    section = README.read_text().split("## Writing an agent", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    module = types.ModuleType("readme_agents")
    exec(compile(code, "README.md", "exec"), module.__dict__)
    sys.modules["readme_agents"] = module
    with override_settings(AGENT_CLASSES=[*settings.AGENT_CLASSES, "readme_agents.SupportAgent"]):
        yield module
    del sys.modules["readme_agents"]


async def test_support_agent_from_the_readme_answers_with_its_tool(readme_agents, ws):
    assert readme_agents.SupportAgent.slug() == "support-agent"
    a = await ws("/agents/support-agent/shop-1")
    await a.receive_json_from()
    await a.receive_json_from()
    await a.send_json_to(chat_request("r1", [user_message("u1", '/tool lookup_order {"order_id": "42"}')]))
    frames = await receive_until(a, is_done("r1"))
    assert text_of(frames) == "lookup_order returned Order 42: shipped."
