"""Running step attempts: the `workflow.step` job kind (layer: workflows; imports
ator.jobs, ator.store, ator.workflows.*).

One job carries one or more steps of a run (`step_ids`: as many as the steps' type batches,
StepType.batch, so cheap pure steps share one job). The job's attempt claims all its steps
in one statement (a conditional update that also writes each attempt row, unique per
(step, attempt)), runs their bodies at once, and stores the outputs in the transaction that
completes its job (`ctx.complete(conn)`), in one statement: outputs, events and the job's
completion commit together or not at all. A worker that dies before that commit leaves the
job to be rescued; the next attempt's claim bumps each step's attempt, so a late write of
the first is fenced out, and a step with a stored output is never claimed again.

A failure other than the expression's own is retried by the kernel with backoff: the
outputs of the job's other steps are stored first, so the retry claims only the failed
steps. On the last attempt a step fails instead, so the run pauses naming it. A step whose
run is paused is handed back (`pending`: the reconciler queues it again on resume); one
whose run ended is `cancelled`.

What an attempt computes is its step type's `run` (workflows/step_types.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ator.jobs import JobContext, JobQueue, LeaseLost
from ator.obs.logging import get_logger
from ator.store import workflow_steps as step_store
from ator.store import workflows as run_store
from ator.store.database import Connection, Database
from ator.store.workflow_steps import ClaimedStep, Output, Spent
from ator.store.workflows import TERMINAL
from ator.workflows.expressions import ExpressionError, Expressions, encode
from ator.workflows.kinds import wake
from ator.workflows.step_types import Attempt, StepError, StepTypes

__all__ = ["StepRunner"]

log = get_logger("ator.workflows.steps")


def _spent(attempt: Attempt) -> Spent | None:
    return Spent(attempt.usage, attempt.cost_usd) if attempt.usage or attempt.cost_usd else None


@dataclass(frozen=True, slots=True)
class _Failed:
    step: ClaimedStep
    error: str
    code: str | None
    spent: Spent | None


@dataclass(frozen=True, slots=True)
class _Retry:
    step: ClaimedStep
    error: BaseException


class StepRunner:
    def __init__(self, db: Database, queue: JobQueue, expressions: Expressions,
                 types: StepTypes) -> None:
        self.db = db
        self.types = types
        self.queue = queue
        self.expressions = expressions

    async def handle(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        wanted = [UUID(s) for s in payload.get("step_ids") or [payload["step_id"]]]
        claimed = await step_store.claim(self.db, ctx.scope, wanted, ctx.id)
        results = await asyncio.gather(*(self._body(ctx, step) for step in claimed))
        done = [r for r in results if isinstance(r, Output)]
        failed = [r for r in results if isinstance(r, _Failed)]
        retry = [r for r in results if isinstance(r, _Retry)]
        ran = {step.id for step in claimed}
        async with self.db.begin() as conn:
            # Step rows, then the run row (the events bump `changes`), then the wake: the
            # order the reconciler's release relies on (store/workflows.py). The job's own
            # row last: the wake's insert may wait on the reconcile job's row, which a
            # heartbeat updating this job's row too may hold (a deadlock, the other way).
            changed = bool(await step_store.complete(conn, done))
            for f in failed:
                changed |= await self._failed(conn, f)
            for step_id in wanted:
                if step_id not in ran:
                    await self._not_runnable(conn, ctx, step_id)
            if changed:
                await wake(self.queue, conn, ctx.scope, claimed[0].run_id)
            if not retry:
                await ctx.complete(conn)
        if retry:
            # The kernel retries the job with backoff; the others' outputs are stored, so
            # the next attempt claims only these.
            raise retry[0].error

    async def _body(self, ctx: JobContext, step: ClaimedStep) -> Output | _Failed | _Retry:
        attempt = Attempt(self.db, ctx.scope, step, ctx, self.expressions)
        try:
            value = await self.types[step.spec["type"]].run(attempt)
            # What bench/workflows.py counts after a SIGKILL: a body that ran to its end.
            log.debug("step body ended", extra={"step_id": str(step.id),
                                                "attempt": step.attempt})
            return Output(step, encode(value).decode(), _spent(attempt))
        except (ExpressionError, StepError) as exc:  # deterministic: would fail alike again
            return _Failed(step, exc.message, exc.code, _spent(attempt))
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:
            if ctx.attempt < ctx.max_attempts:
                return _Retry(step, exc)
            # The last attempt: the step fails (the run pauses naming it) rather than
            # leaving it running under a dead job.
            return _Failed(step, f"{type(exc).__name__}: {exc} (after {ctx.attempt} "
                                 f"attempts)", None, _spent(attempt))

    async def _failed(self, conn: Connection, f: _Failed) -> bool:
        if not await step_store.fail_attempt(conn, f.step, f.error, f.code, f.spent):
            return False
        await run_store.add_event(conn, f.step.run_id, "step_failed", {
            "step": f.step.path, "attempt": f.step.attempt, "error": f.error}, bump=True)
        return True

    async def _not_runnable(self, conn: Connection, ctx: JobContext, step_id: UUID) -> None:
        """A step the claim left out: done already (nothing to do), or its run is paused
        (handed back, and the reconciler told) or ended (cancelled)."""
        found = await step_store.state(conn, ctx.scope, step_id)
        if (found is None or found["has_output"]
                or found["status"] not in ("queued", "running")):
            return
        if found["run_status"] == "paused":
            if await step_store.set_status(conn, step_id, "pending", ["queued", "running"]):
                # Tell the reconciler: a resume that it already handled would otherwise
                # never see this step become pending again.
                await run_store.add_event(conn, found["run_id"], "step_deferred",
                                          {"step_id": str(step_id)}, bump=True)
                await wake(self.queue, conn, ctx.scope, found["run_id"])
        elif found["run_status"] in TERMINAL:
            await step_store.set_status(conn, step_id, "cancelled", ["queued", "running"])
