"""`map`: a child step per item of a list, at most `concurrency` in flight (layer:
workflows; imports ator.store, ator.workflows.step_types).

`over` is an expression giving the list; `step` is the child (any executable type), run
over `{input, item, index}`. Its output is the list of the children's outputs, in order.
`max_steps` is charged for the map and every item before any row is written."""

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

__all__ = ["Map"]


class Map(StepType):
    name = "map"
    schema = step_schema("map", ["over", "step"], over=EXPR, step=CHILD,
                         concurrency={"type": "integer", "minimum": 1, "maximum": 1_000})
    exprs = ("over",)

    def children(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
        if isinstance(spec.get("step"), dict):
            yield ("step",), spec["step"]

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        spec = new.spec
        try:
            items = await tick.evaluate(spec["over"], await tick.context())
        except ExpressionError as exc:
            return await tick.created_failed(new, f"`over` failed: {exc.message}")
        if items is None:
            items = []
        if not isinstance(items, list):
            return await tick.created_failed(
                new, f"`over` gave {type(items).__name__}, not a list")
        if not await tick.charge(spec, 1 + len(items)):
            return False
        step_id = await tick.insert(replace(new, status="running"))
        await step_store.insert_items(tick.conn, run_id=tick.run.id, org_id=tick.run.org_id,
                                      parent_id=step_id, path=new.path, spec=spec["step"],
                                      items=items)
        await tick.event("step_expanded", {"step": new.path, "items": len(items)})
        return await self._advance(tick, spec, step_id, new.path)

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        if row["status"] == "pending":
            await step_store.set_status(tick.conn, row["id"], "running", ["pending"])
        return await self._advance(tick, spec, row["id"], row["path"])

    async def _advance(self, tick: Tick, spec: dict[str, Any], step_id: UUID,
                       path: str) -> Progress:
        counts = await tick.counts(step_id)
        if counts.get("failed"):
            return await tick.fail_step(step_id, spec, path,
                                        f"{counts['failed']} of its items failed",
                                        "budget" if counts["budget"] else None)
        active = counts.get("queued", 0) + counts.get("running", 0)
        pending = counts.get("pending", 0)
        if not active and not pending:
            if await step_store.finish_map(tick.conn, step_id, tick.value_bytes) == "failed":
                return await tick.failed(spec, path, f"its list is above the cap of "
                                         f"{tick.value_bytes} bytes")
            await tick.event("step_done", {"step": path})
            return True
        room = int(spec.get("concurrency", 10)) - active
        if pending and room > 0:
            await tick.enqueue(await step_store.queue_children(tick.conn, step_id, room),
                               batch=tick.types[spec["step"]["type"]].batch)
        return False
