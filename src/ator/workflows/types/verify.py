"""`verify`: run a step, check its output, repair up to `max_repairs` times (layer:
workflows; imports ator.workflows.*).

    {"id": "draft", "type": "verify", "step": {"type": "agent", …},
     "check": "output.score >= 8", "max_repairs": 2}

`check` sees `{input, steps, output, attempt}`; only `true` passes. Anything else fails the
check: a repair runs the step again, telling it `previous` (the output that failed),
`feedback` (what `check` gave, when not `false`) and `attempt`. The output is the first
passing one; when the repairs run out the step fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ator.workflows.step_types import CHILD, EXPR, Tick, step_schema
from ator.workflows.types.sequence import Sequence

__all__ = ["Verify"]


class Verify(Sequence):
    name = "verify"
    schema = step_schema("verify", ["step", "check"], step=CHILD, check=EXPR,
                         max_repairs={"type": "integer", "minimum": 0, "maximum": 10})
    exprs = ("check",)

    def cap(self, spec: Mapping[str, Any]) -> int:
        return 1 + int(spec.get("max_repairs", 2))

    def child_input(self, n: int, last: Any, verdict: Any) -> dict[str, Any]:
        if n == 0:
            return {"attempt": 0}
        return {"attempt": n, "previous": last,
                "feedback": None if verdict is False else verdict}

    async def decide(self, tick: Tick, spec: dict[str, Any], n: int, output: Any
                     ) -> tuple[str, Any]:
        verdict = await tick.evaluate(spec["check"], {**await tick.context(), "output": output,
                                                      "attempt": n})
        if verdict is True:
            await tick.event("step_verified", {"step": spec["id"], "attempt": n})
            return "done", output
        if n + 1 >= self.cap(spec):
            return "fail", (f"its output did not pass the check after {n} repair(s): "
                            f"{str(verdict)[:500]}")
        await tick.event("step_repairing", {"step": spec["id"], "attempt": n + 1})
        return "next", verdict
