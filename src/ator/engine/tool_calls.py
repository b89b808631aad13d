"""Running a tool outside a turn, for an org and a caller (layer: engine; imports tools, store,
jsonenc).

The MCP gateway and workflow steps call an org's tools with no thread. `ToolCalls.run` gives
them what a turn's tool call gets, from the same pieces: the tools the toolsets offer to an
`OrgToolScope` (only toolsets that serve one: `OrgToolset`), the same tool policy rule
(`permitted`; an opt-in tool such as `web_fetch` only when the policy's `allow` names it),
the same `ToolRegistry` run (schema validation, per-tool timeout, result cap with a marker),
the egress guard inside the tools that reach out, and the same untrusted labelling of what
came from outside. Each call, refused or run, leaves exactly one audit row
(`store/tool_audit.py`), also when the caller is cancelled meanwhile.

`run_held` runs a call a turn held for a person's decision (engine/approvals.py) in that
turn's place: the tools the turn's toolsets offer its thread (named as the model saw them,
an MCP tool by its server's name), with the thread and turn in its context.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ator import jsonenc
from ator.store import tool_audit
from ator.store.database import Database
from ator.store.scope import Scope
from ator.tools.base import Caller, Tool, ToolCall, ToolContext, ToolOutcome, result_block
from ator.tools.policy import ToolPolicy
from ator.tools.registry import ToolRegistry
from ator.tools.toolset import LeftOut, OrgToolScope, OrgToolset, ToolScope, Toolset, permitted

__all__ = ["ToolCallResult", "ToolCalls", "ToolListing", "arguments_hash"]


def arguments_hash(args: Any) -> str:
    """sha256 of the arguments' canonical JSON (sorted keys, compact, UTF-8), hex."""
    return hashlib.sha256(jsonenc.canonical(args)).hexdigest()


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """A call's result as its caller reads it: `content` is labelled as untrusted data when
    it came from outside the process, and cut at the cap (`truncated_from` the full size)."""

    tool: str
    content: str
    is_error: bool
    untrusted: bool
    truncated_from: int | None
    duration_ms: int
    error_code: str | None
    audit_id: UUID


@dataclass(frozen=True, slots=True)
class ToolListing:
    tools: list[Tool]
    left_out: list[LeftOut]


class ToolCalls:
    """The org's tools, callable without a turn (one per engine)."""

    def __init__(
        self,
        db: Database,
        toolsets: Sequence[OrgToolset],
        *,
        timeout: float,
        result_chars: int,
        services: Mapping[type, object] | None = None,
        turn_toolsets: Sequence[Toolset] = (),
    ) -> None:
        self._db = db
        self._toolsets = tuple(toolsets)
        self._turn_toolsets = tuple(turn_toolsets)
        self._timeout = timeout
        self._result_chars = result_chars
        self._services = dict(services or {})

    def with_toolsets(self, extra: Sequence[OrgToolset]) -> ToolCalls:
        """The same calls with `extra` toolsets after these (a transport's own tools, such
        as the MCP gateway's published workflows): same policy, caps and audit."""
        return ToolCalls(self._db, [*self._toolsets, *extra], timeout=self._timeout,
                         result_chars=self._result_chars, services=self._services)

    async def run(
        self, scope: Scope, caller: Caller, name: str, args: Any,
        *, policy: ToolPolicy | None = None, conversation: UUID | None = None,
    ) -> ToolCallResult:
        """Run tool `name` with `args` for `caller` in the org of `scope`, under `policy`
        (default: every always-on tool, no opt-in one), in the caller's `conversation` (the
        upstream sessions a tool holds are that conversation's). A refused, invalid, failed
        or timed out call is a result with `is_error` and an `error_code`, never an
        exception; the audit row is written before this returns."""
        started = time.perf_counter()
        call = ToolCall(f"call_{uuid.uuid4().hex}", name, args if isinstance(args, dict)
                        else None, "" if isinstance(args, dict) else jsonenc.dumps(args))
        outcome: ToolOutcome | None = None
        code: str | None = None
        try:
            outcome, code = await self._run(OrgToolScope(
                scope.org_id, caller, policy or ToolPolicy(), conversation), call)
        except asyncio.CancelledError:
            code = "cancelled"
            raise
        except Exception as exc:  # a toolset failed (two tools, one name): audited, raised
            code = str(getattr(exc, "code", "internal"))
            raise
        finally:
            ms = int((time.perf_counter() - started) * 1000)
            audit_id = await asyncio.shield(tool_audit.record(
                self._db, scope, principal_kind=caller.kind, principal_id=caller.id,
                tool=name[:200], args_sha256=arguments_hash(args), duration_ms=ms,
                result_chars=len(outcome.content) if outcome is not None else 0,
                outcome="error" if code is not None else "ok", error_code=code,
            ))
        assert outcome is not None
        block = result_block(outcome.record())
        return ToolCallResult(name, str(block["content"]), outcome.is_error, outcome.untrusted,
                              outcome.truncated_from, ms, code, audit_id)

    async def turn_tool(self, place: ToolScope, name: str) -> Tool | None:
        """The tool of that name the turn's toolsets offer `place`, if any."""
        for ts in self._turn_toolsets:
            for tool in await ts.tools(place):
                if tool.name == name:
                    return tool
        return None

    async def run_held(self, scope: Scope, caller: Caller, name: str, args: dict[str, Any],
                       *, place: ToolScope, tool_use_id: str) -> ToolCallResult:
        """Run a call held in a turn (`place`) once a person approved it, as that turn
        would have: the same toolsets, validation, timeout, cap and labelling; audited
        like any call outside a turn. Never raises for the tool's own failure."""
        started = time.perf_counter()
        call = ToolCall(tool_use_id, name, args)
        outcome: ToolOutcome | None = None
        code: str | None = None
        try:
            tool = await self.turn_tool(place, name)
            registry = ToolRegistry([] if tool is None else [tool])
            if tool is None:
                code = "unknown_tool"
                outcome = ToolOutcome(call.id, name, f"Tool {name!r} is no longer available.",
                                      True, 0, meta={"code": code})
            else:
                def ctx_for(c: ToolCall) -> ToolContext:
                    return ToolContext(scope.org_id, place.thread_id, place.turn_id, c.id,
                                       asyncio.Event(), self._services, caller)

                [outcome] = await registry.run_all([call], ctx_for,
                                                   default_timeout=self._timeout,
                                                   result_limit=self._result_chars)
                if outcome.is_error:
                    code = str(outcome.meta.get("code") or "tool_error")
        except asyncio.CancelledError:
            code = "cancelled"
            raise
        except Exception as exc:  # a toolset failed: audited, raised
            code = str(getattr(exc, "code", "internal"))
            raise
        finally:
            ms = int((time.perf_counter() - started) * 1000)
            audit_id = await asyncio.shield(tool_audit.record(
                self._db, scope, principal_kind=caller.kind, principal_id=caller.id,
                tool=name[:200], args_sha256=arguments_hash(args), duration_ms=ms,
                result_chars=len(outcome.content) if outcome is not None else 0,
                outcome="error" if code is not None else "ok", error_code=code,
            ))
        block = result_block(outcome.record())
        return ToolCallResult(name, str(block["content"]), outcome.is_error, outcome.untrusted,
                              outcome.truncated_from, ms, code, audit_id)

    async def tools(self, scope: Scope, caller: Caller, *, policy: ToolPolicy | None = None,
                    conversation: UUID | None = None) -> ToolListing:
        """The tools `caller` may call in the org of `scope` under `policy`: what `run`
        would run, one per name (the first toolset's), and the sources the toolsets left
        out this time (an MCP server down), each with its code."""
        org = OrgToolScope(scope.org_id, caller, policy or ToolPolicy(), conversation)
        allow = None if org.policy.allow is None else frozenset(org.policy.allow)
        deny = frozenset(org.policy.deny)
        found: dict[str, Tool] = {}
        for ts in self._toolsets:
            for tool in await ts.org_tools(org):
                if tool.turn_only:  # it could only refuse here
                    continue
                if tool.name not in found and permitted(tool.name, allow, deny):
                    found[tool.name] = tool
        return ToolListing(list(found.values()), list(org.left_out))

    async def audit(self, scope: Scope, *, limit: int = 50, cursor: str | None = None
                    ) -> tool_audit.AuditPage:
        """The org's audit rows, newest first, a page at a time (`next_cursor`)."""
        return await tool_audit.list_calls(self._db, scope, limit=limit, cursor=cursor)

    async def _run(self, scope: OrgToolScope, call: ToolCall) -> tuple[ToolOutcome, str | None]:
        offered = [t for ts in self._toolsets for t in await ts.org_tools(scope)]
        allow = None if scope.policy.allow is None else frozenset(scope.policy.allow)
        deny = frozenset(scope.policy.deny)
        registry = ToolRegistry(t for t in offered
                                if t.name == call.name and permitted(t.name, allow, deny))
        if call.name not in registry:
            known = any(t.name == call.name for t in offered)
            code = "tool_denied" if known else "unknown_tool"
            text = (f"Tool {call.name!r} is not allowed by the tool policy." if known
                    else f"Unknown tool {call.name!r}.")
            return ToolOutcome(call.id, call.name, text, True, 0, meta={"code": code}), code

        def ctx_for(c: ToolCall) -> ToolContext:
            return ToolContext(scope.org_id, None, None, c.id, asyncio.Event(),
                               self._services, scope.caller)

        [outcome] = await registry.run_all([call], ctx_for, default_timeout=self._timeout,
                                           result_limit=self._result_chars)
        if not outcome.is_error:
            return outcome, None
        return outcome, str(outcome.meta.get("code") or "tool_error")
