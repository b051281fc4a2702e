"""Agent slugs must match Cloudflare's ``camelCaseToKebabCase`` byte for byte.

The real client builds ``/agents/<slug>/<name>`` itself, so one differing slug means a client that cannot connect.
"""

import pytest

from agents_app.protocol.naming import DEFAULT_INSTANCE_NAME, camel_case_to_kebab_case


@pytest.mark.parametrize(("name", "slug"), [
    # The table of Cloudflare's slug-parity.test.ts.
    ("ChatAgent", "chat-agent"),
    ("MyAssistant", "my-assistant"),
    ("AIChatAgent", "a-i-chat-agent"),
    ("MCPServer", "m-c-p-server"),
    ("HTTPClient", "h-t-t-p-client"),
    ("SimpleBot", "simple-bot"),
    ("A", "a"),
    ("AB", "ab"),
    ("ThinkTestAgent", "think-test-agent"),
    ("TestAssistantAgentAgent", "test-assistant-agent-agent"),
    ("SCREAMING_CASE", "screaming-case"),
    # Binding-style and underscore names (docs/protocol.md#agent-slugs).
    ("COUNTER_DO", "counter-do"),
    ("Chat_Agent", "chat--agent"),
    ("AgentX", "agent-x"),
])
def test_slug_matches_cloudflare(name: str, slug: str) -> None:
    assert camel_case_to_kebab_case(name) == slug


def test_the_default_instance_name_is_default() -> None:
    assert DEFAULT_INSTANCE_NAME == "default"


def test_an_agent_class_slug_is_its_kebab_class_name() -> None:
    from agents_app import ChatAgent

    class AIChatAgent(ChatAgent):
        pass

    assert AIChatAgent.slug() == "a-i-chat-agent"
