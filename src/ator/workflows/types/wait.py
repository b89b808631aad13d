"""`wait`: a duration (`seconds`) or until a time (`until`, RFC 3339) (layer: workflows;
imports ator.store, ator.workflows.step_types).

Nothing runs on a worker: the reconciler writes the step `waiting` with its wake time and
looks again then; its output is `{until}`."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ator.store import workflow_steps as step_store
from ator.store.database import Row
from ator.store.workflow_steps import NewStep
from ator.workflows.step_types import Progress, StepType, Tick, step_schema

__all__ = ["Wait"]


class Wait(StepType):
    name = "wait"
    schema = step_schema("wait", seconds={"type": "number", "minimum": 0,
                                          "maximum": 31_536_000},
                         until={"type": "string", "format": "date-time"},
                         one_of=[{"required": ["seconds"]}, {"required": ["until"]}])

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        if not await tick.charge(new.spec, 1):
            return False
        spec = new.spec
        until = (datetime.fromisoformat(spec["until"]) if "until" in spec
                 else datetime.now(UTC) + timedelta(seconds=float(spec["seconds"])))
        if until.tzinfo is None:
            until = until.replace(tzinfo=UTC)
        await tick.insert(replace(new, status="waiting", wake_at=until))
        return until

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        if row["due"]:
            if await step_store.finish_wait(tick.conn, row["id"],
                                            {"until": row["wake_at"].isoformat()}):
                await tick.event("step_done", {"step": row["path"]})
            return True
        wake_at: datetime = row["wake_at"]
        return wake_at
