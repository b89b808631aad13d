"""`switch`: the first case whose `when` is `true`, else `default`; the other branches are
`skipped` (layer: workflows; imports ator.store, ator.workflows.step_types).

Each branch is a child step (any executable type); the chosen one's output is the
switch's. With no case chosen and no default the switch is done with `null`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

from ator.store import workflow_steps as step_store
from ator.store.database import Row
from ator.store.workflow_steps import NewStep
from ator.workflows.expressions import ExpressionError
from ator.workflows.step_types import (
    CHILD,
    EXPR,
    Path,
    Progress,
    StepType,
    Tick,
    step_schema,
)

__all__ = ["Switch"]


class Switch(StepType):
    name = "switch"
    schema = step_schema("switch", ["cases"], cases={
        "type": "array", "minItems": 1, "maxItems": 50, "items": {
            "type": "object", "required": ["when", "step"], "additionalProperties": False,
            "properties": {"when": EXPR, "step": CHILD}}}, default=CHILD)

    def expressions(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        for j, case in enumerate(spec.get("cases") or ()):
            yield ("cases", j, "when"), case["when"]

    def children(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
        for j, case in enumerate(spec.get("cases") or ()):
            yield ("cases", j, "step"), case["step"]
        if "default" in spec:
            yield ("default",), spec["default"]

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        spec = new.spec
        branches: list[tuple[str, dict[str, Any]]] = [
            (str(j), case["step"]) for j, case in enumerate(spec["cases"])]
        if "default" in spec:
            branches.append(("default", spec["default"]))
        context = await tick.context()
        chosen: str | None = None
        for j, case in enumerate(spec["cases"]):
            try:
                hit = await tick.evaluate(case["when"], context)
            except ExpressionError as exc:
                return await tick.created_failed(new, f"case {j} failed: {exc.message}")
            if hit is True:
                chosen = str(j)
                break
        if chosen is None and "default" in spec:
            chosen = "default"
        if not await tick.charge(spec, 1 if chosen is None else 2):
            return False
        step_id = await tick.insert(replace(new, status="done" if chosen is None else "running"))
        queued: list[UUID] = []
        for position, (name, child) in enumerate(branches):
            made = await tick.insert(tick.child(
                step_id, f"{new.path}/{name}", position, child,
                status="queued" if name == chosen else "skipped"))
            if name == chosen:
                queued.append(made)
        await tick.event("step_switched", {"step": new.path, "branch": chosen})
        await tick.enqueue(queued)
        return chosen is None

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        step_id, path = row["id"], row["path"]
        if row["status"] == "pending":
            await step_store.set_status(tick.conn, step_id, "running", ["pending"])
        counts = await tick.counts(step_id)
        if counts.get("failed"):
            return await tick.fail_step(step_id, spec, path, "its branch failed",
                                        "budget" if counts["budget"] else None)
        if counts.get("done"):
            await step_store.take_child_output(tick.conn, step_id)
            await tick.event("step_done", {"step": path})
            return True
        if counts.get("pending"):  # a branch retried after a resume
            await tick.enqueue(await step_store.queue_children(tick.conn, step_id, 1))
        return False
