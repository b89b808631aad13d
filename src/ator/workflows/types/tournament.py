"""`tournament`: entrants compared pairwise by a judge step, round by round, with byes and
a stated tie rule (layer: workflows; imports ator.store, ator.workflows.*).

    {"id": "best", "type": "tournament", "over": "steps.drafts",
     "judge": {"type": "agent", …, "prompt": "'A: ' & $string(left) & ' B: ' & …"}}

Seeds are the entrants' places in the list (0 is the best seed). Each round pairs the
entrants still in, in seed order; when their number is odd the best seed gets a **bye**
(goes through without a match). A match is a judge step over `{input, steps, left, right,
round, match}`; its output `"left"` or `"right"` (or `{"winner": …}`) names the winner.
**Tie rule**: any other output (a tie, an unclear verdict) sends the better seed through.
The output is `{"winner": entrant, "seed": n, "rounds": r}`. `max_steps` is charged for
the step and all of its `n - 1` matches before anything is created.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any
from uuid import UUID

from ator.store import workflow_steps as step_store
from ator.store.database import Row
from ator.store.workflow_steps import NewStep
from ator.workflows.expressions import ExpressionError
from ator.workflows.step_types import CHILD, EXPR, Path, Progress, StepType, Tick, step_schema

__all__ = ["Tournament", "pairings"]


def pairings(seeds: list[int]) -> tuple[int | None, list[tuple[int, int]]]:
    """A round: (the seed with a bye, or None; the matches), seeds in order."""
    ordered = sorted(seeds)
    bye = ordered.pop(0) if len(ordered) % 2 else None
    return bye, [(ordered[i], ordered[i + 1]) for i in range(0, len(ordered), 2)]


def winner(left: int, right: int, verdict: Any) -> int:
    if isinstance(verdict, dict):
        verdict = verdict.get("winner")
    if verdict == "left":
        return left
    if verdict == "right":
        return right
    return min(left, right)  # the tie rule: the better seed goes through


class Tournament(StepType):
    name = "tournament"
    schema = step_schema("tournament", ["over", "judge"], over=EXPR, judge=CHILD)
    exprs = ("over",)

    def children(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
        if isinstance(spec.get("judge"), dict):
            yield ("judge",), spec["judge"]

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        try:
            entrants = await tick.evaluate(new.spec["over"], await tick.context())
        except ExpressionError as exc:
            return await tick.created_failed(new, f"`over` failed: {exc.message}")
        if not isinstance(entrants, list) or not entrants:
            return await tick.created_failed(new, "`over` must give a non-empty list")
        if not await tick.charge(new.spec, len(entrants)):  # itself + n - 1 matches
            return False
        parent = await tick.insert(replace(new, status="running",
                                           input={"entrants": entrants}))
        return await self._advance(tick, new.spec, parent, new.path, entrants, [])

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        if row["status"] == "pending":
            await step_store.set_status(tick.conn, row["id"], "running", ["pending"])
        found = await step_store.input_of(tick.conn, row["id"])
        return await self._advance(tick, spec, row["id"], row["path"], found["entrants"],
                                   await tick.children(row["id"]))

    async def _advance(self, tick: Tick, spec: dict[str, Any], parent: UUID, path: str,
                       entrants: list[Any], matches: list[Row]) -> Progress:
        seeds, round_no = list(range(len(entrants))), 0
        while len(seeds) > 1:
            bye, pairs = pairings(seeds)
            played = [m for m in matches if m["input"]["round"] == round_no]
            if not played:
                await tick.enqueue([await tick.insert(tick.child(
                    parent, f"{path}/r{round_no}m{j}", len(matches) + j, spec["judge"],
                    input={"left": entrants[a], "right": entrants[b], "round": round_no,
                           "match": j, "seeds": [a, b]}))
                    for j, (a, b) in enumerate(pairs)])
                await tick.event("tournament_round", {"step": path, "round": round_no,
                                                      "matches": len(pairs), "bye": bye})
                return False
            for m in played:
                if m["status"] == "failed":
                    return await tick.fail_step(parent, spec, path,
                                                f"{m['path']} failed: {m['error']}",
                                                m["error_code"])
                if m["status"] == "pending":
                    await tick.requeue(m["id"])
            if any(m["status"] != "done" for m in played):
                return False
            seeds = sorted([*([bye] if bye is not None else []),
                            *(winner(m["input"]["seeds"][0], m["input"]["seeds"][1], m["output"])
                              for m in played)])
            round_no += 1
        output = {"winner": entrants[seeds[0]], "seed": seeds[0], "rounds": round_no}
        if not await tick.done(parent, path, output):
            return await tick.failed(spec, path, "its output is above the value cap")
        return True
