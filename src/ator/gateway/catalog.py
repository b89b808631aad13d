"""What one org key sees and may call over `/mcp` (layer: gateway; imports mcp_types, engine
facades `ToolCalls` and `Approvals`, store.records, tools).

The catalog is the org's tools as `ToolCalls` offers them to the key (the same toolsets,
policy, caps, egress guard, untrusted labelling and audit row as any call outside a turn),
mapped to MCP's types. The key's role decides what it may call: a viewer sees and calls the
read-only tools only; a write tool named by a viewer is refused through `ToolCalls` (so
the refusal is audited too) and answered with a JSON-RPC error.

Approvals: a call the org requires a person to approve (its MCP tools not marked read-only,
when `approve_mcp_writes` is on, the same rule as inside a turn) is not run: its validated
arguments are held as a pending action (`Approvals.hold`) and the answer is a result, not an
error (nothing failed), saying so, with `_meta["ator/code"] = "approval_pending"` and
`_meta["ator/pending_action_id"]`. A member's approval runs it once and records its result on
the action (`GET /v1/approvals/{id}`); a denial or the timeout records why.

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

from ator.engine.approvals import Approvals
from ator.engine.tool_calls import ToolCallResult, ToolCalls
from ator.store.records import Principal
from ator.tools.base import Caller, Tool, ToolCall
from ator.tools.policy import ToolPolicy
from ator.tools.registry import ToolRegistry

__all__ = ["INVALID_PARAMS", "Catalog"]

INVALID_PARAMS = -32602
_REFUSALS = frozenset({"unknown_tool", "tool_denied"})
_HEADER_MEMO = 4096


class Catalog:
    """The org's tools for a principal, listed and called."""

    def __init__(self, calls: ToolCalls, approvals: Approvals | None = None) -> None:
        self._calls = calls
        self._approvals = approvals
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
        if policy is None and (held := await self._hold(principal, name, args, conversation)):
            return held
        result = await self._calls.run(principal.scope, _caller(principal), name, args,
                                       policy=policy, conversation=conversation)
        if result.error_code in _REFUSALS:
            message = (f"tool {name!r} changes things: the key's role (viewer) may call "
                       "read-only tools only" if policy is not None else result.content)
            raise MCPError(INVALID_PARAMS, message, data={
                "code": result.error_code, "audit_id": str(result.audit_id)})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)],
            is_error=result.is_error, meta=_facts(result))


    async def _hold(self, principal: Principal, name: str, args: dict[str, Any],
                    conversation: UUID | None) -> types.CallToolResult | None:
        """The answer to a call held for a person's approval, or None: run it."""
        if self._approvals is None or not await self._approvals.gates_mcp_writes(
                principal.scope):
            return None
        listing = await self._calls.tools(principal.scope, _caller(principal),
                                          conversation=conversation)
        tool = next((t for t in listing.tools if t.name == name), None)
        if tool is None or tool.read_only or not tool.origin.startswith("mcp"):
            return None
        if ToolRegistry([tool]).validate(ToolCall("gateway", name, args)) is not None:
            return None  # invalid arguments: refused by the run like any call, audited
        action = await self._approvals.hold(principal.scope, name, args, subject={
            "via": "mcp_gateway", "key_id": str(principal.key_id), "origin": tool.origin})
        text = (f"Tool {name!r} did not run: this org requires a member's approval for it. "
                f"It waits as pending action {action.id} (GET /v1/approvals/{action.id}); "
                "once decided, its result or the reason is recorded there.")
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=False,
            meta={"ator/code": "approval_pending", "ator/pending_action_id": str(action.id)})


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
