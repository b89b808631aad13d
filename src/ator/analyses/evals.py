"""Eval sets: fixed model replies per kind and the verdict the validator must give each
(layer: analyses; imports ator.store, ator.analyses.*).

`run_cases(kind)` runs a kind's cases through the same `validate` a real run uses (no model
call, no database: a `record` reference is checked against the case's
`input.existing[record]`) and scores them: a case passes when its verdict is the expected
one and, when the case names it, the stored output is exactly the expected output.
`Evals.run` stores a run (`eval_runs`: kind, version, setup, cases, passed, per-case
results) and compares it with the kind's previous run: the cases that newly fail
(`regressed`) or newly pass (`fixed`), and the score before and after. `ci(kinds)` is the
CI mode: every kind's cases, failing when any case fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from ator.analyses.kind import AnalysisKind, EvalCase
from ator.analyses.validate import validate
from ator.store import analyses as store
from ator.store.database import Database

__all__ = ["EvalReport", "Evals", "ci", "run_cases"]

SETUP = "fixed-outputs"


@dataclass(slots=True)
class EvalReport:
    kind: str
    version: int
    setup: str
    results: list[dict[str, Any]]
    run_id: UUID | None = None
    compared: dict[str, Any] = field(default_factory=dict)

    @property
    def cases(self) -> int:
        return len(self.results)

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r["passed"])

    @property
    def score(self) -> float:
        return self.passed / self.cases if self.cases else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "setup": self.setup,
                "cases": self.cases, "passed": self.passed, "score": round(self.score, 4),
                "results": self.results, "run_id": str(self.run_id) if self.run_id else None,
                "compared": self.compared}


async def _case(kind: AnalysisKind, case: EvalCase) -> dict[str, Any]:
    existing = case.input.get("existing") or {}

    async def exists(record: str, ids: list[str]) -> set[str]:
        return {x for x in ids if x in set(map(str, existing.get(record, [])))}

    verdict = await validate(case.output, kind.checker, kind.validators, input=case.input,
                             exists=exists)
    ok = verdict.verdict == case.expect
    if ok and case.expect_output is not None:
        ok = verdict.output == case.expect_output
    return {"case": case.name, "expect": case.expect, "got": verdict.verdict, "passed": ok,
            "problems": verdict.problems[:5]}


async def run_cases(kind: AnalysisKind) -> EvalReport:
    """Score the kind's fixed-output cases (nothing stored)."""
    return EvalReport(kind.name, kind.version, SETUP, [await _case(kind, c) for c in kind.evals])


async def ci(kinds: Sequence[AnalysisKind], *, minimum: int = 4) -> tuple[bool, list[EvalReport]]:
    """Every kind's cases; ok only when every case passes and every kind has `minimum`."""
    reports = [await run_cases(k) for k in kinds]
    ok = all(r.passed == r.cases and r.cases >= minimum for r in reports)
    return ok, reports


class Evals:
    """Stored eval runs, compared across a kind's versions."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def run(self, org_id: UUID | None, kind: AnalysisKind) -> EvalReport:
        report = await run_cases(kind)
        previous = await store.eval_runs(self.db, org_id, kind.name, limit=1)
        report.run_id = await store.save_eval(
            self.db, org_id, kind=kind.name, kind_version=kind.version, setup=report.setup,
            cases=report.cases, passed=report.passed, results=report.results)
        if previous:
            before = {r["case"]: r["passed"] for r in previous[0]["results"]}
            now = {r["case"]: r["passed"] for r in report.results}
            report.compared = {
                "previous_run": str(previous[0]["id"]),
                "previous_version": previous[0]["kind_version"],
                "previous_score": round(previous[0]["passed"] / previous[0]["cases"], 4)
                if previous[0]["cases"] else 0.0,
                "regressed": sorted(c for c, ok in now.items() if not ok and before.get(c)),
                "fixed": sorted(c for c, ok in now.items() if ok and before.get(c) is False),
            }
        return report

    async def history(self, org_id: UUID | None, kind: str) -> list[dict[str, Any]]:
        return await store.eval_runs(self.db, org_id, kind)
