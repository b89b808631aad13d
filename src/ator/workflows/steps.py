"""Running one step attempt: the `workflow.step` job kind (layer: workflows; imports
ator.jobs, ator.store, ator.workflows.*).

An attempt claims its step (a conditional update that also writes the attempt row, unique
per (step, attempt)), computes, and stores the output in the transaction that completes
its job (`ctx.complete(conn)`): output, event and job completion commit together or not at
all. A worker that dies before that commit leaves the job to be rescued; the next attempt's
claim bumps the step's attempt, so a late write of the first is fenced out, and a step with
a stored output is never claimed again. A failure other than the expression's own is
retried by the kernel with backoff; on the last attempt the step fails instead, so the run
pauses naming it. A step whose run is paused is handed back
(`pending`: the reconciler queues it again on resume); one whose run ended is `cancelled`.

What an attempt computes is its step type's `run` (workflows/step_types.py).
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from ator.jobs import JobContext, JobQueue, LeaseLost
from ator.store import workflow_steps as step_store
from ator.store import workflows as run_store
from ator.store.database import Connection, Database
from ator.store.workflow_steps import ClaimedStep, Spent
from ator.store.workflows import TERMINAL
from ator.workflows.expressions import ExpressionError, Expressions, encode
from ator.workflows.kinds import wake
from ator.workflows.step_types import Attempt, StepError, StepTypes

__all__ = ["StepRunner"]


def _spent(attempt: Attempt) -> Spent | None:
    return Spent(attempt.usage, attempt.cost_usd) if attempt.usage or attempt.cost_usd else None


class StepRunner:
    def __init__(self, db: Database, queue: JobQueue, expressions: Expressions,
                 types: StepTypes) -> None:
        self.db = db
        self.types = types
        self.queue = queue
        self.expressions = expressions

    async def handle(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        step_id = UUID(payload["step_id"])
        step = await step_store.claim(self.db, ctx.scope, step_id, ctx.id)
        if step is None:
            await self._not_runnable(ctx, step_id)
            return
        attempt = Attempt(self.db, ctx.scope, step, ctx, self.expressions)
        try:
            output = encode(await self.types[step.spec["type"]].run(attempt)).decode()
        except (ExpressionError, StepError) as exc:  # deterministic: would fail alike again
            await self._failed(ctx, step, exc.message, exc.code, _spent(attempt))
            return
        except (asyncio.CancelledError, LeaseLost):
            raise
        except Exception as exc:
            if ctx.attempt < ctx.max_attempts:
                raise  # the kernel retries the attempt with backoff
            # The last attempt: the step fails (the run pauses naming it) rather than
            # leaving it running under a dead job.
            await self._failed(ctx, step, f"{type(exc).__name__}: {exc} (after "
                                          f"{ctx.attempt} attempts)", None, _spent(attempt))
            return
        size = len(output.encode())
        async with self.db.begin() as conn:
            # Step row, then run row (the event bumps `changes`), then the wake: the order
            # the reconciler's release relies on (store/workflows.py).
            if await step_store.complete(conn, step, output, size, run_store.preview(output),
                                         _spent(attempt)):  # with its step_done event
                await wake(self.queue, conn, ctx.scope, step.run_id)
            await ctx.complete(conn)

    async def _failed(self, ctx: JobContext, step: ClaimedStep, error: str, code: str | None,
                      spent: Spent | None) -> None:
        async with self.db.begin() as conn:
            if await step_store.fail_attempt(conn, step, error, code, spent):
                await run_store.add_event(conn, step.run_id, "step_failed", {
                    "step": step.path, "attempt": step.attempt, "error": error}, bump=True)
                await wake(self.queue, conn, ctx.scope, step.run_id)
            await ctx.complete(conn)

    async def _not_runnable(self, ctx: JobContext, step_id: UUID) -> None:
        async with self.db.begin() as conn:
            found = await step_store.state(conn, ctx.scope, step_id)
            if (found is not None and not found["has_output"]
                    and found["status"] in ("queued", "running")):
                if found["run_status"] == "paused":
                    if await step_store.set_status(conn, step_id, "pending",
                                                   ["queued", "running"]):
                        await self._deferred(conn, ctx, found["run_id"], step_id)
                elif found["run_status"] in TERMINAL:
                    await step_store.set_status(conn, step_id, "cancelled",
                                                ["queued", "running"])
            await ctx.complete(conn)

    async def _deferred(self, conn: Connection, ctx: JobContext, run_id: UUID,
                        step_id: UUID) -> None:
        # Tell the reconciler: a resume that it already handled would otherwise never see
        # this step become pending again.
        await run_store.add_event(conn, run_id, "step_deferred", {"step_id": str(step_id)},
                                  bump=True)
        await wake(self.queue, conn, ctx.scope, run_id)
