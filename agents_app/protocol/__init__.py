"""The ``cf_agent_*`` wire protocol: pure Python, no Django (spec: cloudflare-agents.md §2)."""
