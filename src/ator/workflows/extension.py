"""Workflows as an extension of the kernel (layer: workflows; imports agent.extension,
ator.jobs, ator.workflows.*).

Contributes the `Workflows` service, the step types (`StepTypes`: the built-ins, `agent`
given the kernel's `Asker`), a per-turn field and a loop hook for the turns of agent steps
(workflows/agents.py: subagent tools denied, the run's usd budget) and its job kinds:
`workflow.reconcile` (the run's one reconciler), `workflow.step` (one step attempt),
`workflow.scheduled` (a schedule's firing starts a run: `RunSchedules`,
workflows/scheduled.py) and `workflow.notify` (a run that ends tells the conversation that
started it: workflows/told.py); the agent tools (workflows/tools.py) with their
between-steps notices, per-turn count and turn end; `RunEvents` (workflows/live.py) for live
readers of a run's events; `HumanGates` (workflows/gates.py), the decision kind of `human`
steps, which the approvals extension registers. Its tables come with the core migrations
(0012, 0015, 0017, 0023). The HTTP routes are `ator.api.workflows` and
`ator.api.schedules` (the API layer mounts them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ator.agent.extension import Extension, Kernel, TurnEnd, TurnField
from ator.agent.hooks import LoopHook
from ator.jobs import JobKind, JobKinds, JobQueue, Schedules
from ator.net.egress import Egress
from ator.store.run_origins import NOTIFY_KIND
from ator.store.workflow_threads import TURN_SQL
from ator.tools.base import Tool
from ator.workflows.agents import RunBudget, WorkflowTurn
from ator.workflows.expressions import Expressions
from ator.workflows.gates import HumanGates
from ator.workflows.kinds import RECONCILE, STEP
from ator.workflows.live import RunEvents
from ator.workflows.reconciler import Reconciler
from ator.workflows.scheduled import BUFFER_ATTEMPTS, SCHEDULED, RunSchedules
from ator.workflows.service import Workflows
from ator.workflows.step_types import StepTypes
from ator.workflows.steps import StepRunner
from ator.workflows.told import OPEN_RUNS_SQL, OpenRuns, RunTeller
from ator.workflows.tools import workflow_tools
from ator.workflows.types import builtin_types
from ator.workflows.types.subrun import SubRun

__all__ = ["WorkflowsExtension"]


class WorkflowsExtension(Extension):
    name = "workflows"

    def __init__(self, kernel: Kernel) -> None:
        s = kernel.settings
        self.expressions = Expressions(timeout_ms=s.workflow_expr_timeout_ms,
                                       depth=s.workflow_expr_depth,
                                       value_bytes=s.workflow_value_bytes)
        self._kinds = JobKinds([
            # A reconcile attempt that finds the run's lease held retries soon (not a fault).
            JobKind(RECONCILE, self._reconcile, max_attempts=100, backoff_base=0.2,
                    backoff_cap=5.0, priority=1),
            JobKind(STEP, self._step, max_attempts=5, backoff_base=0.5, timeout=120.0),
            JobKind(SCHEDULED, self._scheduled, max_attempts=BUFFER_ATTEMPTS,
                    backoff_base=1.0, backoff_cap=60.0, timeout=60.0),
            JobKind(NOTIFY_KIND, self._notify, max_attempts=10, backoff_base=0.5,
                    timeout=60.0),
        ])
        # The queue this extension enqueues on knows its own kinds (their attempts policy).
        queue = JobQueue(kernel.db, self._kinds)
        self.types = StepTypes(builtin_types(asker=kernel.asker,
                                             egress=Egress.from_settings(s),
                                             master_key=kernel.master_key))
        # A sub-run plans its child like any start (late-bound: the service comes next, and
        # the recipe schema it builds must already know the type).
        self.types.register(SubRun(lambda *a, **k: self.workflows.plan(*a, **k),
                                   s.workflow_max_depth))
        self.workflows = Workflows(kernel.db, queue, s, kernel.coord, self.types)
        self.reconciler = Reconciler(kernel.db, queue, self.expressions, self.types,
                                     kernel.coord, lease_ttl=s.workflow_lease_ttl,
                                     value_bytes=s.workflow_value_bytes,
                                     pause_ttl=s.workflow_pause_ttl)
        self.steps = StepRunner(kernel.db, queue, self.expressions, self.types)
        self.schedules = RunSchedules(Schedules(kernel.db, self._kinds), self.workflows)
        self.teller = RunTeller(kernel.db, kernel.waker)
        self.live = RunEvents(kernel.db)
        self.gates = HumanGates(kernel.db, queue)
        self._hooks = [RunBudget(kernel.db, kernel.prices), self.teller.injector()]

    async def _reconcile(self, ctx: Any, payload: dict[str, Any]) -> None:
        await self.reconciler.handle(ctx, payload)

    async def _step(self, ctx: Any, payload: dict[str, Any]) -> None:
        await self.steps.handle(ctx, payload)

    async def _scheduled(self, ctx: Any, payload: dict[str, Any]) -> None:
        await self.schedules.fire(ctx, payload)

    async def _notify(self, ctx: Any, payload: dict[str, Any]) -> None:
        await self.teller.handle(ctx, payload)

    def job_kinds(self) -> Sequence[Any]:
        return list(self._kinds)

    def tools(self) -> Sequence[Tool]:
        return workflow_tools()

    def hooks(self) -> Sequence[LoopHook]:
        return self._hooks

    def ends(self) -> Sequence[TurnEnd]:
        return [self.teller]

    def fields(self) -> Sequence[TurnField]:
        return [TurnField("workflow_runs", OPEN_RUNS_SQL, OpenRuns.build),
                TurnField("workflow", TURN_SQL, WorkflowTurn.build)]

    def services(self) -> Mapping[type, object]:
        return {Workflows: self.workflows, RunSchedules: self.schedules,
                RunTeller: self.teller, RunEvents: self.live, HumanGates: self.gates}

    async def aclose(self) -> None:
        await self.live.aclose()
        self.expressions.close()
