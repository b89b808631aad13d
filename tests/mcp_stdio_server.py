"""A stdio MCP server for tests (run as a subprocess: `python tests/mcp_stdio_server.py`)."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("stdio-demo")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> str:
    return str(a + b)


if __name__ == "__main__":
    server.run(transport="stdio")
