"""MCP: the client on the official SDK, its session pool and the per-turn toolset (layer:
mcp, between agent and tools; imports tools, net, errors)."""
