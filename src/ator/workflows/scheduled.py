"""Workflow runs on a schedule (layer: workflows; imports ator.errors, ator.jobs, ator.obs,
ator.store, ator.workflows.service).

A schedule of a workflow is a kernel schedule (jobs/schedules.py: cron in an IANA zone,
overlap and catch-up, one firing per tick across replicas) of the job kind `SCHEDULED`,
whose payload is the target: workflow, input, version, budget. Each firing is one run:

- its idempotency key is `schedule:<schedule id>:<tick>`, so a firing's job run twice (a
  lost worker) finds the run it made, and a tick fires at most one run;
- the kernel's overlap check sees only the firing's job, which ends as soon as the run is
  started; a run goes on for longer. So the job itself checks the schedule's runs still
  going (store/run_origins.py): `skip` drops the tick, `buffer` retries until the active
  run ends (the kernel keeps later ticks buffered behind it, one at most), `allow` starts
  at once. The kernel's unique key keeps two firings of a `skip`/`buffer` schedule from
  checking at the same time.
- the run's budgets are the recipe's, lowered by the schedule's (`max_steps`,
  `wall_clock_s`): a scheduled run's wall clock applies as any run's.

The input is validated against the latest version when the schedule is made (a schedule
that could never start is refused), and again at each firing against the version pinned.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from ator.errors import AtorError, ValidationFailed
from ator.jobs import JobContext, Retry, Schedules
from ator.obs.logging import get_logger
from ator.store import run_origins as origin_store
from ator.store import schedules as schedule_store
from ator.store.run_origins import Origin
from ator.store.schedules import ScheduleRow
from ator.store.scope import Scope
from ator.workflows.recipe import validate_input
from ator.workflows.service import Workflows

__all__ = ["BUFFER_ATTEMPTS", "SCHEDULED", "RunSchedules", "run_key"]

log = get_logger("ator.workflows.scheduled")

SCHEDULED = "workflow.scheduled"
# A buffered firing looks again at its active run after 5 s, 10 s, … up to a minute; the
# kind's attempts (extension.py) cover about a day of waiting before the firing is dead.
_BUFFER_RETRY, _BUFFER_RETRY_CAP = 5.0, 60.0
BUFFER_ATTEMPTS = 1_500
_BUDGET_KEYS = ("max_steps", "wall_clock_s")


def run_key(schedule_id: UUID, tick: datetime) -> str:
    """The idempotency key of the run a tick fires."""
    return f"schedule:{schedule_id}:{tick.isoformat()}"


class RunSchedules:
    """Schedules whose target is a workflow (what `/v1/schedules` serves)."""

    def __init__(self, schedules: Schedules, workflows: Workflows) -> None:
        self.schedules = schedules
        self.workflows = workflows

    async def create(
        self, scope: Scope, *, name: str, cron: str, zone: str, overlap: str, catch_up: float,
        workflow_id: UUID, input: Any, version: int | None = None,
        budget: dict[str, Any] | None = None,
    ) -> ScheduleRow:
        """Raises NotFound (the workflow or version), ValidationFailed (`invalid_cron`,
        `invalid_zone`, `invalid_overlap`, `invalid_catch_up`, `input_invalid`,
        `invalid_budget`) or Conflict (`schedule_exists`)."""
        pinned = await self.workflows.version(scope, workflow_id, version)
        validate_input(pinned["recipe"], input)
        budget = dict(budget or {})
        unknown = set(budget) - set(_BUDGET_KEYS)
        if unknown:
            raise ValidationFailed(f"a schedule's budget takes {', '.join(_BUDGET_KEYS)}",
                                   code="invalid_budget")
        payload = {"workflow_id": str(workflow_id), "input": input, "version": version,
                   "budget": budget}
        return await self.schedules.create(scope, name=name, kind=SCHEDULED, cron=cron,
                                           zone=zone, payload=payload, overlap=overlap,
                                           catch_up=catch_up)

    async def fire(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        """The `SCHEDULED` job: start the tick's run (see the module for overlap)."""
        if ctx.schedule_id is None or ctx.tick is None:
            log.warning("a scheduled-run job without a schedule tick", extra={"job": ctx.id})
            return
        row = await schedule_store.get(ctx.db, ctx.scope, ctx.schedule_id)
        if row is None:
            return  # deleted since it fired
        if row.overlap != "allow":
            active = await origin_store.active_of_schedule(ctx.db, ctx.scope, row.id)
            if active is not None:
                if row.overlap == "buffer":
                    raise Retry(after=min(_BUFFER_RETRY * ctx.attempt, _BUFFER_RETRY_CAP),
                                reason="the previous run is still going")
                log.info("schedule tick skipped: its previous run is still going",
                         extra={"schedule_id": str(row.id), "tick": ctx.tick.isoformat(),
                                "run_id": str(active)})
                return
        try:
            run, created = await self.workflows.start(
                ctx.scope, UUID(payload["workflow_id"]), payload.get("input", {}),
                key=run_key(row.id, ctx.tick), version=payload.get("version"),
                budget=payload.get("budget") or {},
                origin=Origin(schedule_id=row.id, tick=ctx.tick))
        except AtorError as exc:
            if exc.status < 500:  # the workflow was deleted, its input no longer fits…
                log.warning("a schedule's run could not start: %s", exc.message,
                            extra={"schedule_id": str(row.id), "code": exc.code})
                return
            raise
        if created:
            log.info("schedule fired a run", extra={"schedule_id": str(row.id),
                                                    "run_id": str(run["id"])})
