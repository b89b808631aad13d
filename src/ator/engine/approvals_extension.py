"""Tool approvals as an extension of the engine (layer: engine; imports agent, engine.approvals,
engine.tool_calls, store.approvals, tools, workflows.gates).

What it contributes: a per-turn field (`ApprovalPolicy`: the setup's `tool_policy.approve`
globs and timeout, and whether the org requires approval of MCP tools not marked read-only,
`orgs.settings.approve_mcp_writes`), the loop hook that holds those calls (`ApprovalGate`),
the `Approvals` service and its expiry job kind. Once bound, it registers the workflows'
`HumanGates` (a `human` step's gate: decided on the same path) when that extension is on.

Where a held call is written: `ApprovalGate.hold` returns the step's holds, the first
carrying one `PendingActions` part for all of them; the step writer joins it to the
statement that persists the step and ends the turn `waiting`. A feature that must report
the same moment adds its part next to it, in `_parts` (the `approval.requested` webhook
needs none: it is written with the turn's end, by webhooks' own turn end).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ator.agent.extension import Extension, Kernel, Services, TurnField
from ator.agent.hooks import Hold, LoopHook
from ator.agent.state import TurnContext, TurnState
from ator.engine.approvals import EXPIRE, Approvals, ToolDecisions
from ator.engine.tool_calls import ToolCalls
from ator.errors import ConfigError
from ator.store import approvals as store
from ator.store.parts import StepPart
from ator.tools.base import Tool, ToolCall
from ator.tools.registry import ToolRegistry
from ator.tools.toolset import permitted
from ator.workflows.gates import HumanGates
from ator.workflows.types.human import EXPIRE_KIND as GATE_EXPIRE

__all__ = ["ApprovalGate", "ApprovalPolicy", "ApprovalsExtension"]

_FIELD_SQL = ("jsonb_build_object('approve', s.tool_policy -> 'approve', "
              "'timeout', s.tool_policy -> 'approve_timeout', "
              "'mcp_writes', o.settings -> 'approve_mcp_writes')")


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """Which of a turn's tool calls a person must approve."""

    approve: frozenset[str]
    mcp_writes: bool
    timeout: float | None

    @classmethod
    def build(cls, raw: Any) -> ApprovalPolicy | None:
        raw = raw if isinstance(raw, dict) else {}
        globs = raw.get("approve")
        approve = frozenset(str(g) for g in globs) if isinstance(globs, list) else frozenset()
        mcp = raw.get("mcp_writes") is True
        timeout = raw.get("timeout")
        if not approve and not mcp:
            return None  # nothing to hold: the hook costs nothing
        return cls(approve, mcp, float(timeout) if isinstance(timeout, int | float) else None)

    def requires(self, tool: Tool) -> bool:
        if self.approve and permitted(tool.name, self.approve, frozenset()):
            return True
        return self.mcp_writes and tool.origin.startswith("mcp") and not tool.read_only


class ApprovalGate(LoopHook):
    """Holds the calls the turn's `ApprovalPolicy` gates: pending actions, turn `waiting`."""

    def __init__(self, service: Approvals) -> None:
        self.service = service

    async def hold(self, turn: TurnContext, state: TurnState, calls: Sequence[ToolCall],
                   tools: ToolRegistry) -> Sequence[Hold]:
        policy = turn.get(ApprovalPolicy)
        if policy is None:
            return ()
        rows: list[tuple[ToolCall, store.Row]] = []
        for call in calls:
            tool = tools.get(call.name)
            if tool is None or call.input is None or not policy.requires(tool):
                continue
            rows.append((call, store.Row(
                uuid.uuid4(), call.id, call.name, dict(call.input),
                {"origin": tool.origin, "read_only": tool.read_only,
                 "description": tool.description[:500]})))
        if not rows:
            return ()
        parts = self._parts(policy, [r for _c, r in rows])
        return [Hold(call, parts if i == 0 else (), {"action_id": str(row.id)})
                for i, (call, row) in enumerate(rows)]

    def _parts(self, policy: ApprovalPolicy, rows: list[store.Row]) -> tuple[StepPart, ...]:
        """What the statement ending the turn `waiting` writes for the step's held calls."""
        return (store.PendingActions(tuple(rows), policy.timeout or self.service.timeout,
                                     EXPIRE, self.service.job_attempts),)


class ApprovalsExtension(Extension):
    name = "approvals"

    def __init__(self, kernel: Kernel) -> None:
        self.service = Approvals(kernel.db, kernel.waker,
                                 timeout=kernel.settings.approval_timeout,
                                 settings_ttl=kernel.settings.mcp_catalog_ttl)
        self._calls: ToolCalls | None = None
        self.service.register(ToolDecisions(kernel.db, self._tool_calls))

    def _tool_calls(self) -> ToolCalls:
        if self._calls is None:
            raise ConfigError("approvals: the engine has no ToolCalls service")
        return self._calls

    def bound(self, services: Services) -> None:
        self._calls = services.get(ToolCalls)
        gates = services.get(HumanGates)  # workflow `human` steps: the same decide-once path
        if GATE_EXPIRE != EXPIRE:
            raise ConfigError("workflow gates expire by another job kind")
        self.service.register(gates)

    def hooks(self) -> Sequence[LoopHook]:
        return [ApprovalGate(self.service)]

    def fields(self) -> Sequence[TurnField]:
        return [TurnField("approvals", _FIELD_SQL, ApprovalPolicy.build)]

    def job_kinds(self) -> Sequence[Any]:
        return self.service.job_kinds()

    def services(self) -> Mapping[type, object]:
        return {Approvals: self.service}
