"""The ``cf_agent_*`` wire protocol: pure Python, no Django (docs/protocol.md)."""
