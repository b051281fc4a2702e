"""Names on the wire: agent slugs and the default instance name (docs/protocol.md#agent-slugs).

The client builds ``/agents/<slug>/<name>`` from the agent's class name and an instance name, so
both sides must spell a slug the same way. Pure: nothing here imports Django.
"""

import re

# The instance name ``useAgent`` / ``useAgentChat`` connect to when none is given.
DEFAULT_INSTANCE_NAME = "default"


def camel_case_to_kebab_case(name: str) -> str:
    """The slug of a class name, exactly as Cloudflare's ``camelCaseToKebabCase``.

    ``ChatAgent`` → ``chat-agent``, ``AIChatAgent`` → ``a-i-chat-agent``, ``CHAT_AGENT`` →
    ``chat-agent``, ``Chat_Agent`` → ``chat--agent``.
    """
    if name == name.upper() and name != name.lower():
        return name.lower().replace("_", "-")
    kebab = re.sub(r"[A-Z]", lambda m: "-" + m.group(0).lower(), name)
    kebab = kebab.removeprefix("-")
    return re.sub(r"-$", "", kebab.replace("_", "-"))
