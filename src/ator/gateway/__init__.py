"""The MCP gateway: each org's tools served over `/mcp` to outside MCP clients (layer: gateway,
above the engine; imports engine facades, mcp, starlette).

`McpGateway` is the ASGI app `api/app.py` mounts at `/mcp` and attaches to the runtime in its
lifespan (as the socket gateway is); `Catalog` is what one org key sees and may call.
"""

from ator.gateway.catalog import Catalog
from ator.gateway.server import McpGateway

__all__ = ["Catalog", "McpGateway"]
