"""MCP as an extension of the engine (layer: engine; imports agent.extension, engine.mcp,
engine.mcp_notices).

What it contributes: two toolsets (the policy-gated `web_fetch` and the org's MCP servers'
tools, with `read_tool_result`), a loop hook (the model is told which tools could not be
mounted), and its services: `McpService` (the session pool and catalog), `McpServers` (the
org resource's CRUD) and `StoredResults` (full results, paged). Its sessions close with the
engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ator.agent.extension import Extension, Kernel
from ator.agent.hooks import LoopHook
from ator.engine.mcp import McpServers, McpService, StoredResults
from ator.engine.mcp_notices import McpNotices
from ator.tools.toolset import Toolset

__all__ = ["McpExtension"]


class McpExtension(Extension):
    name = "mcp"

    def __init__(self, kernel: Kernel) -> None:
        self.service = McpService(kernel.settings, kernel.db, kernel.master_key)
        self.servers = McpServers(kernel.db, self.service, kernel.coord)

    def toolsets(self) -> Sequence[Toolset]:
        return [self.service.gated, self.service.toolset]

    def hooks(self) -> Sequence[LoopHook]:
        return [McpNotices(self.service.toolset)]

    def services(self) -> Mapping[type, object]:
        return {McpService: self.service, McpServers: self.servers,
                StoredResults: self.service.results}

    async def aclose(self) -> None:
        await self.service.aclose()
