"""The shape `verify` and `loop` share: one child at a time, each next one decided by an
expression over the last one's output (layer: workflows; imports ator.store,
ator.workflows.step_types).

The step charges `max_steps` for itself and for every child it may make (`1 + cap`) before
creating anything, and gives back what it did not use when it ends. Its children are
`<path>/0`, `<path>/1`, …; each sees what `child_input` gives it besides `{input, steps}`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ator.store import workflow_steps as step_store
from ator.store.database import Row
from ator.store.workflow_steps import NewStep
from ator.workflows.expressions import ExpressionError
from ator.workflows.step_types import Path, Progress, StepType, Tick

__all__ = ["Sequence"]


class Sequence(StepType):
    #: the spec key of the most children the step may make
    cap_key = ""

    def children(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
        if isinstance(spec.get("step"), dict):
            yield ("step",), spec["step"]

    def cap(self, spec: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def child_input(self, n: int, last: Any, verdict: Any) -> dict[str, Any]:
        raise NotImplementedError

    async def decide(self, tick: Tick, spec: dict[str, Any], n: int, output: Any
                     ) -> tuple[str, Any]:
        """After child `n` is done: ("done", the step's output), ("next", what the next
        child is told) or ("fail", why)."""
        raise NotImplementedError

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        if not await tick.charge(new.spec, 1 + self.cap(new.spec)):
            return False
        parent = await tick.insert(replace(new, status="running"))
        await tick.enqueue([await tick.insert(tick.child(
            parent, f"{new.path}/0", 0, new.spec["step"], input=self.child_input(0, None, None)))])
        return False

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        parent, path = row["id"], row["path"]
        if row["status"] == "pending":
            await step_store.set_status(tick.conn, parent, "running", ["pending"])
        made = await tick.children(parent)
        last = made[-1]
        if last["status"] == "failed":
            return await tick.fail_step(parent, spec, path, f"{last['path']} failed: "
                                        f"{last['error']}", last["error_code"])
        if last["status"] == "pending":
            await tick.requeue(last["id"])
            return False
        if last["status"] != "done":
            return False
        n = len(made) - 1
        try:
            outcome, value = await self.decide(tick, spec, n, last["output"])
        except ExpressionError as exc:
            return await tick.fail_step(parent, spec, path, exc.message)
        if outcome == "fail":
            return await tick.fail_step(parent, spec, path, str(value))
        if outcome == "done":
            await tick.refund(self.cap(spec) - len(made))
            if not await tick.done(parent, path, value):
                return await tick.failed(spec, path, "its output is above the value cap")
            return True
        verdict = value
        await tick.enqueue([await tick.insert(tick.child(
            parent, f"{path}/{n + 1}", n + 1, spec["step"],
            input=self.child_input(n + 1, last["output"], verdict)))])
        return False
