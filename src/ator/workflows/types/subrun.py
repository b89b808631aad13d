"""`workflow`: a step that runs another published workflow as a child run (layer:
workflows; imports ator.errors, ator.store, ator.workflows.step_types).

    {"id": "sub", "type": "workflow", "workflow": "<workflow id>", "version": 2,
     "input": "<JSONata over {input, steps}>", "budget": {"max_steps": …, "wall_clock_s": …}}

Nothing runs on a worker. `create` (in the parent's tick) checks the depth (the parent's
+ 1, at most `workflow_max_depth`), plans the child like any start (its input checked
against its recipe, its budgets within the ceilings, lowered by the step's `budget`),
and inserts it with its `run_started` event and reconcile job, the step `waiting` on it
(store/subruns.py). The child's end wakes the parent; `advance` then finishes the step
with the child's output and rolls the child's spend up onto the step and the parent (the
same transaction: once), or fails the step with the child's reason. Pause, resume and
cancel of the parent reach the child (workflows/service.py); a parent resumed after its
child failed the step starts a new child.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.errors import AtorError
from ator.store import gates as gate_store
from ator.store import subruns
from ator.store import workflow_steps as step_store
from ator.store import workflows as run_store
from ator.store.database import Row
from ator.store.scope import Scope
from ator.store.workflow_steps import NewStep
from ator.store.workflows import NewRun
from ator.workflows.expressions import ExpressionError
from ator.workflows.step_types import EXPR, Progress, StepType, Tick, step_schema

__all__ = ["SubRun"]

Planner = Callable[..., Awaitable[NewRun]]

_PROPS: dict[str, Any] = {
    "workflow": {"type": "string", "format": "uuid"},
    "version": {"type": "integer", "minimum": 1},
    "input": EXPR,
    "budget": {"type": "object", "additionalProperties": False, "properties": {
        "max_steps": {"type": "integer", "minimum": 1},
        "wall_clock_s": {"type": "number", "exclusiveMinimum": 0},
        "usd": {"type": "number", "exclusiveMinimum": 0}}},
}


class SubRun(StepType):
    name = "workflow"
    schema = step_schema("workflow", ["workflow"], **_PROPS)
    exprs = ("input",)

    def __init__(self, plan: Planner, max_depth: int) -> None:
        self.plan = plan
        self.max_depth = max_depth

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        if not await tick.charge(new.spec, 1):
            return False
        planned = await self._plan(tick, new.spec)
        if isinstance(planned, str):
            return await tick.created_failed(new, planned)
        child, depth = planned
        child_id = uuid.uuid4()
        step_id = await tick.insert(replace(new, status="waiting",
                                            input={"child": str(child_id)}))
        await self._start(tick, new.path, step_id, child_id, child, depth)
        return False

    async def _plan(self, tick: Tick, spec: dict[str, Any]) -> tuple[NewRun, int] | str:
        """The child as it would start, and its depth; or why it cannot."""
        depth = await subruns.depth(tick.conn, tick.run.id) + 1
        if depth > self.max_depth:
            return f"a sub-run would be {depth} deep; the limit is {self.max_depth}"
        try:
            given = (await tick.evaluate(spec["input"], await tick.context())
                     if "input" in spec else {})
            child = await self.plan(Scope(tick.run.org_id), UUID(spec["workflow"]), given,
                                    version=spec.get("version"), budget=spec.get("budget"))
        except ExpressionError as exc:
            return f"`input`: {exc.message}"
        except AtorError as exc:  # not published, input refused by the child's schema
            return exc.message
        return child, depth

    async def _start(self, tick: Tick, path: str, step_id: UUID, child_id: UUID,
                     child: NewRun, depth: int) -> None:
        run, scope = tick.run, Scope(tick.run.org_id)
        await subruns.start_child(
            tick.conn, scope, child_id, workflow_id=child.workflow_id, version=child.version,
            recipe=child.recipe, input=child.input, max_steps=child.max_steps,
            wall_clock_s=child.wall_clock_s, usd_budget=child.usd_budget,
            idle_s=child.idle_s, parent_run_id=run.id, parent_step_id=step_id, depth=depth)
        await run_store.add_event(tick.conn, child_id, "run_started",
                                  {"version": child.version, "parent_run_id": str(run.id)},
                                  bump=True)
        await tick.queue.enqueue(scope, subruns.RECONCILE_KIND, {"run_id": str(child_id)},
                                 unique_key=f"run:{child_id}", within=tick.conn)
        await tick.event("subrun_started", {"step": path, "run_id": str(child_id)})

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        if row["status"] == "pending":
            # Resumed after the child failed the step: a new child.
            planned = await self._plan(tick, spec)
            if isinstance(planned, str):
                await gate_store.reopen_step(tick.conn, row["id"], {})
                return await tick.fail_step(row["id"], spec, row["path"], planned)
            fresh = uuid.uuid4()
            if await gate_store.reopen_step(tick.conn, row["id"], {"child": str(fresh)}):
                await self._start(tick, row["path"], row["id"], fresh, *planned)
            return False
        given = await step_store.input_of(tick.conn, row["id"])
        child_id = given.get("child") if isinstance(given, Mapping) else None
        child = (await subruns.child(tick.conn, tick.run.org_id, UUID(str(child_id)))
                 if child_id else None)
        if child is None:
            return await tick.fail_step(row["id"], spec, row["path"], "the sub-run is gone")
        if child["status"] in ("running", "paused", "waiting"):
            return False  # its end wakes this run
        if child["status"] == "succeeded":
            if await tick.done(row["id"], row["path"], child["output"]):
                await subruns.roll_up(tick.conn, row["id"], Decimal(child["spent_usd"] or 0))
                return True
            return False
        await subruns.roll_up(tick.conn, row["id"], Decimal(child["spent_usd"] or 0))
        reason = child["fail_reason"] or child["cancel_reason"] or child["status"]
        error = child["error"] or f"the sub-run ended {child['status']}"
        return await tick.fail_step(row["id"], spec, row["path"],
                                    f"sub-run {child['id']} {child['status']} ({reason}): "
                                    f"{error}", "budget" if reason == "budget" else None)
