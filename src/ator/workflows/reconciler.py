"""The reconciler: the one writer that creates a run's steps and makes them ready (layer:
workflows; imports ator.jobs, ator.obs, ator.store, ator.workflows.*).

It runs as the `workflow.reconcile` job kind, at most one job per run at a time (the job's
unique key), and holds a lease on the run row besides (taken, renewed every ttl/3 while it
works, and checked by every one of its transactions), so even a rescued duplicate cannot
write beside a live one. One tick, in one transaction under the run row's lock:

    wall clock out → the run fails (`wall_clock`)
    for each top-level step, in order:
      no row yet   → create it (charging `max_steps` first: an expander that would exceed
                     it fails the run before creating anything) and stop
      running      → advance it (queue a map's next items up to its concurrency, take a
                     switch's branch output, finish a due wait) and stop unless it finished
      failed       → pause the run naming the step (or fail it, when `on_error` says so)
    all done       → the run succeeds with its output

Then it lets go, unless the run's `changes` counter moved while it worked (a step finished,
someone paused or resumed): it reads that counter under the row lock in the transaction
that completes its job, and ticks again when it moved. A change committed after that lock
is released finds the job done, so its own `wake` enqueues the next reconcile.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from ator.jobs import JobContext, JobQueue, LeaseLost, Retry
from ator.obs.logging import get_logger
from ator.store import workflow_steps as step_store
from ator.store import workflows as run_store
from ator.store.database import Connection, Database, Row
from ator.store.scope import Scope
from ator.store.workflow_steps import NewStep
from ator.store.workflows import RunFence
from ator.workflows.expressions import ExpressionError, Expressions
from ator.workflows.kinds import STEP, wake

__all__ = ["Reconciler"]

log = get_logger("ator.workflows.reconciler")

# What advancing a step says: go on to the next step, stop here, or stop and come back then.
Progress = bool | datetime
_SHIFT = 30.0  # seconds one reconcile job keeps ticking before it hands over


class Reconciler:
    def __init__(self, db: Database, queue: JobQueue, expressions: Expressions, *,
                 lease_ttl: float, value_bytes: int, pause_ttl: float) -> None:
        self.db = db
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
                seen, wake_at = await self._tick(ctx.scope, run_id, owner)
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

    async def _tick(self, scope: Scope, run_id: UUID, owner: str) -> tuple[int, datetime | None]:
        async with self.db.begin() as conn:
            run = await run_store.fence(conn, run_id, owner, self.ttl, self.pause_ttl)
            if run is None:
                raise LeaseLost(f"run {run_id}: the reconciler's lease was taken")
            if run.status == "paused" and run.pause_expired:
                if await run_store.expire_pause(conn, run_id, owner):
                    await run_store.add_event(conn, run_id, "run_cancelled",
                                              {"reason": "pause_expired"}, bump=False)
                return run.changes, None
            if run.status != "running":
                return run.changes, None
            if run.overdue:
                await self._fail(conn, run, owner, "wall_clock",
                                 "the run's wall-clock budget ran out")
                return run.changes, None
            return run.changes, await self._advance(conn, Tick(scope, run, owner))

    async def _advance(self, conn: Connection, tick: Tick) -> datetime | None:
        run = tick.run
        rows = {r["path"]: r for r in await step_store.top(conn, run.id)}
        for position, spec in enumerate(run.recipe["steps"]):
            row = rows.get(spec["id"])
            if row is None:
                progress = await self._create(conn, tick, position, spec)
            else:
                progress = await self._step(conn, tick, spec, row)
            if isinstance(progress, datetime):
                return min(progress, run.deadline)
            if not progress:
                return None
        await self._succeed(conn, tick)
        return None

    # Creating a step ---------------------------------------------------------------------

    async def _create(self, conn: Connection, tick: Tick, position: int,
                      spec: dict[str, Any]) -> Progress:
        run, kind = tick.run, spec["type"]
        new = NewStep(run.id, run.org_id, spec["id"], position, kind, spec, "queued")
        if kind == "transform":
            if not await self._charge(conn, tick, spec, 1):
                return False
            await self._queue(conn, tick, [await step_store.insert(conn, new)])
            return False
        if kind == "wait":
            if not await self._charge(conn, tick, spec, 1):
                return False
            until = (datetime.fromisoformat(spec["until"]) if "until" in spec
                     else datetime.now(UTC) + timedelta(seconds=float(spec["seconds"])))
            if until.tzinfo is None:
                until = until.replace(tzinfo=UTC)
            await step_store.insert(conn, replace(new, status="waiting", wake_at=until))
            return until
        context = {"input": run.input, "steps": await step_store.top_outputs(conn, run.id)}
        if kind == "map":
            return await self._expand_map(conn, tick, new, context)
        return await self._expand_switch(conn, tick, new, context)

    async def _expand_map(self, conn: Connection, tick: Tick, new: NewStep,
                          context: dict[str, Any]) -> Progress:
        spec = new.spec
        try:
            items = await self.expressions.evaluate(spec["over"], context)
        except ExpressionError as exc:
            return await self._created_failed(conn, tick, new, f"`over` failed: {exc.message}")
        if items is None:
            items = []
        if not isinstance(items, list):
            return await self._created_failed(
                conn, tick, new, f"`over` gave {type(items).__name__}, not a list")
        if not await self._charge(conn, tick, spec, 1 + len(items)):
            return False
        step_id = await step_store.insert(conn, replace(new, status="running"))
        await step_store.insert_items(conn, run_id=tick.run.id, org_id=tick.run.org_id,
                                      parent_id=step_id, path=new.path, spec=spec["step"],
                                      items=items)
        await run_store.add_event(conn, tick.run.id, "step_expanded",
                                  {"step": new.path, "items": len(items)}, bump=False)
        return await self._map(conn, tick, spec, step_id, new.path)

    async def _expand_switch(self, conn: Connection, tick: Tick, new: NewStep,
                             context: dict[str, Any]) -> Progress:
        spec = new.spec
        branches: list[tuple[str, dict[str, Any]]] = [
            (str(j), case["step"]) for j, case in enumerate(spec["cases"])]
        if "default" in spec:
            branches.append(("default", spec["default"]))
        chosen: str | None = None
        for j, case in enumerate(spec["cases"]):
            try:
                hit = await self.expressions.evaluate(case["when"], context)
            except ExpressionError as exc:
                return await self._created_failed(conn, tick, new,
                                                  f"case {j} failed: {exc.message}")
            if hit is True:
                chosen = str(j)
                break
        if chosen is None and "default" in spec:
            chosen = "default"
        if not await self._charge(conn, tick, spec, 1 if chosen is None else 2):
            return False
        status = "done" if chosen is None else "running"
        step_id = await step_store.insert(conn, replace(new, status=status))
        queued: list[UUID] = []
        for position, (name, child) in enumerate(branches):
            made = await step_store.insert(conn, NewStep(
                tick.run.id, tick.run.org_id, f"{new.path}/{name}", position, child["type"],
                child, "queued" if name == chosen else "skipped", parent_id=step_id))
            if name == chosen:
                queued.append(made)
        await run_store.add_event(conn, tick.run.id, "step_switched",
                                  {"step": new.path, "branch": chosen}, bump=False)
        await self._queue(conn, tick, queued)
        return chosen is None

    async def _created_failed(self, conn: Connection, tick: Tick, new: NewStep,
                              error: str) -> Progress:
        step_id = await step_store.insert(conn, replace(new, status="running"))
        await step_store.fail(conn, step_id, error)
        return await self._failed(conn, tick, new.spec, new.path, error)

    # Advancing a step -----------------------------------------------------------------------

    async def _step(self, conn: Connection, tick: Tick, spec: dict[str, Any],
                    row: Row) -> Progress:
        status, kind = row["status"], spec["type"]
        if status in ("done", "skipped"):
            return True
        if status == "failed":
            return await self._failed(conn, tick, spec, row["path"], row["error"] or "failed")
        if kind == "transform":
            # pending: handed back while the run was paused, or retried after a resume
            if status == "pending" and await step_store.set_status(conn, row["id"], "queued",
                                                                   ["pending"]):
                await self._queue(conn, tick, [row["id"]])
            return False
        if kind == "wait":
            if row["due"]:
                waited = {"until": row["wake_at"].isoformat()}
                if await step_store.finish_wait(conn, row["id"], waited):
                    await run_store.add_event(conn, tick.run.id, "step_done",
                                              {"step": row["path"]}, bump=False)
                return True
            wake_at: datetime = row["wake_at"]
            return wake_at
        if status == "pending":
            await step_store.set_status(conn, row["id"], "running", ["pending"])
        if kind == "map":
            return await self._map(conn, tick, spec, row["id"], row["path"])
        return await self._switch(conn, tick, spec, row["id"], row["path"])

    async def _map(self, conn: Connection, tick: Tick, spec: dict[str, Any], step_id: UUID,
                   path: str) -> Progress:
        counts = await step_store.counts(conn, step_id)
        if counts.get("failed"):
            error = f"{counts['failed']} of its items failed"
            await step_store.fail(conn, step_id, error)
            return await self._failed(conn, tick, spec, path, error)
        active = counts.get("queued", 0) + counts.get("running", 0)
        pending = counts.get("pending", 0)
        if not active and not pending:
            if await step_store.finish_map(conn, step_id, self.value_bytes) == "failed":
                return await self._failed(conn, tick, spec, path,
                                          f"its list is above the cap of {self.value_bytes} "
                                          "bytes")
            await run_store.add_event(conn, tick.run.id, "step_done", {"step": path},
                                      bump=False)
            return True
        room = int(spec.get("concurrency", 10)) - active
        if pending and room > 0:
            await self._queue(conn, tick, await step_store.queue_children(conn, step_id, room))
        return False

    async def _switch(self, conn: Connection, tick: Tick, spec: dict[str, Any],
                      step_id: UUID, path: str) -> Progress:
        counts = await step_store.counts(conn, step_id)
        if counts.get("failed"):
            error = "its branch failed"
            await step_store.fail(conn, step_id, error)
            return await self._failed(conn, tick, spec, path, error)
        if counts.get("done"):
            await step_store.take_child_output(conn, step_id)
            await run_store.add_event(conn, tick.run.id, "step_done", {"step": path},
                                      bump=False)
            return True
        if counts.get("pending"):  # a branch retried after a resume
            await self._queue(conn, tick, await step_store.queue_children(conn, step_id, 1))
        return False

    # The run's outcomes ----------------------------------------------------------------------

    async def _charge(self, conn: Connection, tick: Tick, spec: dict[str, Any], n: int) -> bool:
        if await step_store.charge(conn, tick.run.id, n):
            return True
        await self._fail(conn, tick.run, tick.owner, "max_steps",
                         f"step {spec['id']!r} needs {n} step(s); the run has used "
                         f"{tick.run.steps_used} of its {tick.run.max_steps}")
        return False

    async def _queue(self, conn: Connection, tick: Tick, step_ids: list[UUID]) -> None:
        if step_ids:
            run_id = str(tick.run.id)
            await self.queue.enqueue_many(
                tick.scope, STEP, [{"run_id": run_id, "step_id": str(s)} for s in step_ids],
                within=conn)

    async def _failed(self, conn: Connection, tick: Tick, spec: dict[str, Any], path: str,
                      error: str) -> Progress:
        """A step failed: pause the run naming it, or fail the run when `on_error` says so."""
        on_error = spec.get("on_error") or tick.run.recipe.get("on_error") or "pause"
        message = f"step {path!r} failed: {error}"
        if on_error == "fail":
            await self._fail(conn, tick.run, tick.owner, "step_failed", message)
        elif await run_store.pause_failed(conn, tick.run.id, tick.owner,
                                          reason=f"step_failed:{path}", error=message):
            await run_store.add_event(conn, tick.run.id, "run_paused",
                                      {"reason": f"step_failed:{path}", "error": message},
                                      bump=False)
        return False

    async def _fail(self, conn: Connection, run: RunFence, owner: str, reason: str,
                    error: str) -> None:
        if await run_store.finish(conn, run.id, owner, status="failed", fail_reason=reason,
                                  error=error):
            await run_store.add_event(conn, run.id, "run_failed",
                                      {"reason": reason, "error": error}, bump=False)

    async def _succeed(self, conn: Connection, tick: Tick) -> None:
        run = tick.run
        outputs = await step_store.top_outputs(conn, run.id)
        if "output" in run.recipe:
            try:
                output = await self.expressions.evaluate(
                    run.recipe["output"], {"input": run.input, "steps": outputs})
            except ExpressionError as exc:
                await self._fail(conn, run, tick.owner, "output_failed",
                                 f"the recipe's output failed: {exc.message}")
                return
        else:
            output = outputs.get(run.recipe["steps"][-1]["id"])
        if await run_store.finish(conn, run.id, tick.owner, status="succeeded", output=output):
            await run_store.add_event(conn, run.id, "run_succeeded", {}, bump=False)


class Tick:
    """What one tick works on: the run (as locked), its org and the lease holder."""

    __slots__ = ("owner", "run", "scope")

    def __init__(self, scope: Scope, run: RunFence, owner: str) -> None:
        self.scope = scope
        self.run = run
        self.owner = owner
