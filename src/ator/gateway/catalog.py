"""What one org key sees and may call over `/mcp` (layer: gateway; imports mcp_types, engine
facade `ToolCalls`, store.records, tools).

The catalog is the org's tools as `ToolCalls` offers them to the key (the same toolsets,
policy, caps, egress guard, untrusted labelling and audit row as any call outside a turn),
mapped to MCP's types. The key's role decides what it may call: a viewer sees and calls the
read-only tools only; a write tool named by a viewer is refused through `ToolCalls` (so
the refusal is audited too) and answered with a JSON-RPC error.

Errors: a tool the key may not call (unknown, denied) is a JSON-RPC error -32602 whose
`data.code` is ator's stable code; a tool that ran and failed is a result with `isError`
and the code in `_meta["ator/code"]`, as MCP tells servers to report execution errors.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any
from uuid import UUID

import mcp_types as types
from mcp.shared.exceptions import MCPError

from ator.engine.tool_calls import ToolCallResult, ToolCalls
from ator.store.records import Principal
from ator.tools.base import Caller, Tool
from ator.tools.policy import ToolPolicy

__all__ = ["INVALID_PARAMS", "Catalog"]

INVALID_PARAMS = -32602
_REFUSALS = frozenset({"unknown_tool", "tool_denied"})
_HEADER_MEMO = 4096


class Catalog:
    """The org's tools for a principal, listed and called."""

    def __init__(self, calls: ToolCalls) -> None:
        self._calls = calls
        # The schemas listed with `x-mcp-header` annotations (rare), by (org, tool): what the
        # SDK checks a 2026 call's `Mcp-Param-*` headers against without listing again.
        self._header_schemas: OrderedDict[tuple[UUID, str], dict[str, Any]] = OrderedDict()

    def header_schema(self, org_id: UUID, name: str) -> dict[str, Any] | None:
        """The input schema of a listed tool that declares `Mcp-Param` headers, else None
        (nothing to check the call's headers against)."""
        return self._header_schemas.get((org_id, name))

    def _remember_headers(self, org_id: UUID, tools: list[Tool]) -> None:
        for tool in tools:
            if _declares_headers(tool.input_schema):
                self._header_schemas[(org_id, tool.name)] = tool.input_schema
                self._header_schemas.move_to_end((org_id, tool.name))
        while len(self._header_schemas) > _HEADER_MEMO:
            self._header_schemas.popitem(last=False)

    async def tools(self, principal: Principal, conversation: UUID | None
                    ) -> types.ListToolsResult:
        """The key's catalog; what was left out (an upstream server down) is named in
        `_meta["ator/left_out"]` with its code. Per tenant: never cacheable by anyone else."""
        listing = await self._calls.tools(principal.scope, _caller(principal),
                                          conversation=conversation)
        tools = listing.tools
        if principal.role == "viewer":
            tools = [t for t in tools if t.read_only]
        self._remember_headers(principal.org_id, tools)
        left_out = [{"source": x.source, "code": x.code, "message": x.message}
                    for x in listing.left_out]
        return types.ListToolsResult(tools=[_spec(t) for t in tools], ttl_ms=0,
                                     cache_scope="private",
                                     meta={"ator/left_out": left_out} if left_out else None)

    async def call(self, principal: Principal, name: str, args: dict[str, Any],
                   conversation: UUID | None) -> types.CallToolResult:
        policy = None
        if principal.role == "viewer":
            listing = await self._calls.tools(principal.scope, _caller(principal),
                                              conversation=conversation)
            offered = {t.name: t for t in listing.tools}
            tool = offered.get(name)
            if tool is not None and not tool.read_only:
                policy = ToolPolicy(deny=[name])  # refused and audited by ToolCalls
        result = await self._calls.run(principal.scope, _caller(principal), name, args,
                                       policy=policy, conversation=conversation)
        if result.error_code in _REFUSALS:
            message = (f"tool {name!r} changes things: the key's role (viewer) may call "
                       "read-only tools only" if policy is not None else result.content)
            raise MCPError(INVALID_PARAMS, message, data={
                "code": result.error_code, "audit_id": str(result.audit_id)})
        # Approvals (issue 21, not yet on main): a gated tool's call is held by `ToolCalls`
        # as a pending action instead of run. Its answer belongs here: a result (not an
        # error: nothing failed) whose text says the call awaits a member's approval, with
        # `_meta["ator/code"] = "approval_pending"` and `_meta["ator/pending_action_id"]`,
        # so the client can tell the person where to decide and call again (or poll) later.
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)],
            is_error=result.is_error, meta=_facts(result))


def _declares_headers(schema: Any) -> bool:
    if isinstance(schema, dict):
        return "x-mcp-header" in schema or any(_declares_headers(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_declares_headers(v) for v in schema)
    return False


def _caller(principal: Principal) -> Caller:
    return Caller("key", principal.key_id)


def _spec(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name, description=tool.description, input_schema=tool.input_schema,
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only,
                                          open_world_hint=tool.untrusted))


def _facts(result: ToolCallResult) -> dict[str, Any]:
    facts: dict[str, Any] = {"ator/audit_id": str(result.audit_id),
                             "ator/untrusted": result.untrusted}
    if result.error_code is not None:
        facts["ator/code"] = result.error_code
    return facts
