"""`loop`: one iteration at a time until a condition, capped (layer: workflows; imports
ator.workflows.*).

    {"id": "refine", "type": "loop", "step": {"type": "transform", "expr": "…"},
     "until": "output >= 100", "max_iterations": 10}

Each iteration sees `iteration` (from 0) and `previous` (the last iteration's output);
`until` sees `{input, steps, output, iteration}` and ends the loop when `true`. At
`max_iterations` the loop stops whatever `until` says. Its output says which:
`{"last": …, "iterations": n, "stopped": "until" | "cap"}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ator.workflows.step_types import CHILD, EXPR, Tick, step_schema
from ator.workflows.types.sequence import Sequence

__all__ = ["Loop"]


class Loop(Sequence):
    name = "loop"
    schema = step_schema("loop", ["step", "until", "max_iterations"], step=CHILD, until=EXPR,
                         max_iterations={"type": "integer", "minimum": 1, "maximum": 1_000})
    exprs = ("until",)

    def cap(self, spec: Mapping[str, Any]) -> int:
        return int(spec["max_iterations"])

    def child_input(self, n: int, last: Any, verdict: Any) -> dict[str, Any]:
        return {"iteration": n, "previous": last}

    async def decide(self, tick: Tick, spec: dict[str, Any], n: int, output: Any
                     ) -> tuple[str, Any]:
        hit = await tick.evaluate(spec["until"], {**await tick.context(), "output": output,
                                                  "iteration": n})
        if hit is True or n + 1 >= self.cap(spec):
            stopped = "until" if hit is True else "cap"
            if stopped == "cap":
                await tick.event("step_capped", {"step": spec["id"], "iterations": n + 1})
            return "done", {"last": output, "iterations": n + 1, "stopped": stopped}
        return "next", None
