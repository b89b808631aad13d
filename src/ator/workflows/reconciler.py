"""The reconciler: the one writer that creates a run's steps and makes them ready (layer:
workflows; imports ator.jobs, ator.obs, ator.store, ator.workflows.*).

It runs as the `workflow.reconcile` job kind, at most one job per run at a time (the job's
unique key), and holds a lease on the run row besides (taken, renewed every ttl/3 while it
works, and checked by every one of its transactions), so even a rescued duplicate cannot
write beside a live one. One tick, in one transaction under the run row's lock:

    wall clock out → the run fails (`wall_clock`)
    no step finished for `idle_s` (no wait pending) → the run fails (`no_progress`)
    for each top-level step, in order:
      no row yet   → its type's `create` (charging `max_steps` first: an expander that
                     would exceed it fails the run before creating anything)
      done/skipped → go on
      failed       → pause the run naming the step (or fail it, when `on_error` says so)
      otherwise    → its type's `advance`; stop unless it says go on
    all done       → the run succeeds with its output

Step types are a registry (workflows/step_types.py); nothing here names one.

Then it lets go, unless the run's `changes` counter moved while it worked (a step finished,
someone paused or resumed): it reads that counter under the row lock in the transaction
that completes its job, and ticks again when it moved. A change committed after that lock
is released finds the job done, so its own `wake` enqueues the next reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import datetime
from typing import Any
from uuid import UUID

from ator.coord.base import Coordinator
from ator.jobs import JobContext, JobQueue, LeaseLost, Retry
from ator.obs.logging import get_logger
from ator.store import workflow_steps as step_store
from ator.store import workflows as run_store
from ator.store.database import Connection, Database
from ator.store.scope import Scope
from ator.store.workflow_steps import NewStep
from ator.workflows.expressions import ExpressionError, Expressions
from ator.workflows.kinds import run_channel, wake
from ator.workflows.step_types import StepTypes, Tick

__all__ = ["Reconciler"]

log = get_logger("ator.workflows.reconciler")

_LOOK = '{"wake":1}'
_SHIFT = 30.0  # seconds one reconcile job keeps ticking before it hands over


class Reconciler:
    def __init__(self, db: Database, queue: JobQueue, expressions: Expressions,
                 types: StepTypes, coord: Coordinator, *, lease_ttl: float, value_bytes: int,
                 pause_ttl: float) -> None:
        self.db = db
        self.coord = coord
        self.types = types
        self.queue = queue
        self.expressions = expressions
        self.ttl = lease_ttl
        self.value_bytes = value_bytes
        self.pause_ttl = pause_ttl

    async def handle(self, ctx: JobContext, payload: dict[str, Any]) -> None:
        run_id = UUID(payload["run_id"])
        owner = f"{ctx.owner}:{ctx.id}:{ctx.attempt}"
        left = await run_store.take_lease(self.db, ctx.scope, run_id, owner, self.ttl)
        if left is not None:
            if left < 0:
                return  # the run is gone (deleted with its org)
            raise Retry(after=min(max(left, 0.05), self.ttl), reason="the run's lease is held")
        renewing = asyncio.create_task(self._renew(run_id, owner))
        started = time.monotonic()
        try:
            while True:
                seen, wake_at, idle_at = await self._tick(ctx.scope, run_id, owner)
                # Persist, then emit: the tick committed; followers of the run's log read
                # what it (and the step ends that woke it) wrote.
                await self.coord.publish(run_channel(run_id), _LOOK)
                async with self.db.begin() as conn:
                    now = await run_store.changes_locked(conn, run_id, owner)
                    if now is None:
                        raise LeaseLost(f"run {run_id}: the reconciler's lease was taken")
                    # A busy run would keep one job ticking for as long as items finish:
                    # after a while it hands over to a fresh job instead (its timeout is
                    # per job, and other runs' reconcilers deserve the slot too).
                    tired = time.monotonic() - started > _SHIFT
                    if now != seen and not tired:
                        continue  # something changed while we worked: tick again
                    await run_store.release_lease(conn, run_id, owner)
                    await ctx.complete(conn)
                    if now != seen:
                        wake_at = None  # now, not later
                    if now != seen or wake_at is not None:
                        # After complete: the run's unique key is free again.
                        await wake(self.queue, conn, ctx.scope, run_id, at=wake_at)
                    if idle_at is not None:
                        # The no-progress close needs a look then, even if nothing happens.
                        await wake(self.queue, conn, ctx.scope, run_id, at=idle_at,
                                   timer="idle")
                    return
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _renew(self, run_id: UUID, owner: str) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            if not await run_store.renew_lease(self.db, run_id, owner, self.ttl):
                log.warning("lost the lease of a run", extra={"run_id": str(run_id)})
                return

    async def _tick(self, scope: Scope, run_id: UUID, owner: str
                    ) -> tuple[int, datetime | None, datetime | None]:
        """One look at the run: (its change counter as seen, when to look again, when it
        would be idle for too long)."""
        async with self.db.begin() as conn:
            run = await run_store.fence(conn, run_id, owner, self.ttl, self.pause_ttl)
            if run is None:
                raise LeaseLost(f"run {run_id}: the reconciler's lease was taken")
            if run.status == "paused" and run.pause_expired:
                if await run_store.expire_pause(conn, run_id, owner):
                    await run_store.add_event(conn, run_id, "run_cancelled",
                                              {"reason": "pause_expired"}, bump=False)
                return run.changes, None, None
            if run.status != "running":
                return run.changes, None, None
            tick = Tick(conn, scope, run, owner, queue=self.queue,
                        expressions=self.expressions, value_bytes=self.value_bytes,
                        types=self.types)
            if run.overdue:
                await tick.fail_run("wall_clock", "the run's wall-clock budget ran out")
                return run.changes, None, None
            if run.idle:
                await tick.fail_run("no_progress", "no step of the run finished within its "
                                    "no-progress time (budget.idle_s)")
                return run.changes, None, None
            return run.changes, await self._advance(conn, tick), run.idle_at

    async def _advance(self, conn: Connection, tick: Tick) -> datetime | None:
        run = tick.run
        rows = {r["path"]: r for r in await step_store.top(conn, run.id)}
        for position, spec in enumerate(run.recipe["steps"]):
            kind = self.types[spec["type"]]
            row = rows.get(spec["id"])
            if row is None:
                progress = await kind.create(tick, NewStep(
                    run.id, run.org_id, spec["id"], position, spec["type"], spec, "queued"))
            elif row["status"] in ("done", "skipped"):
                progress = True
            elif row["status"] == "failed":
                progress = await tick.failed(spec, row["path"], row["error"] or "failed",
                                             row["error_code"])
            else:
                progress = await kind.advance(tick, spec, row)
            if isinstance(progress, datetime):
                return min(progress, run.deadline)
            if not progress:
                return None
        await self._succeed(conn, tick)
        return None

    async def _succeed(self, conn: Connection, tick: Tick) -> None:
        run = tick.run
        outputs = await step_store.top_outputs(conn, run.id)
        if "output" in run.recipe:
            try:
                output = await self.expressions.evaluate(
                    run.recipe["output"], {"input": run.input, "steps": outputs})
            except ExpressionError as exc:
                await tick.fail_run("output_failed", f"the recipe's output failed: {exc.message}")
                return
        else:
            output = outputs.get(run.recipe["steps"][-1]["id"])
        if await run_store.finish(conn, run.id, tick.owner, status="succeeded", output=output):
            await run_store.add_event(conn, run.id, "run_succeeded", {}, bump=False)
