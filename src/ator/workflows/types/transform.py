"""`transform`: a JSONata expression over the step's context (layer: workflows; imports
ator.workflows.step_types)."""

from __future__ import annotations

from typing import Any

from ator.workflows.step_types import EXPR, Attempt, Executable, child_schema, step_schema

__all__ = ["Transform"]


class Transform(Executable):
    name = "transform"
    schema = step_schema("transform", ["expr"], expr=EXPR)
    child_schema = child_schema("transform", ["expr"], expr=EXPR)
    exprs = ("expr",)
    batch = 10  # pure and bounded (workflows/expressions.py): many share one job

    async def run(self, attempt: Attempt) -> Any:
        return await attempt.evaluate(attempt.step.spec["expr"], await attempt.data())
