"""MCP servers as tool sources: declarations, per-process connections, the state clients see.

``servers`` declares a server (``MCPServer``, secrets by reference), ``connections`` keeps this
process's open sessions and turns them into the turn's tools, ``state`` stores what every process
may read and broadcast (``cf_agent_mcp_servers``), ``service`` adds and removes the servers of an
instance at runtime, ``checks`` looks for tool-name collisions (docs/architecture.md#mcp-servers).
"""
