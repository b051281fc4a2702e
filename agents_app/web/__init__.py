"""The browser's transports: the WebSocket consumer (``cf_agent_*`` frames), its routing and
frame limits, and the HTTP pages (chat, conversation index). Thin adapters over the services.
"""
