"""The job worker: claims, runs, completes, retries and rescues (layer: jobs; imports
ator.context, ator.obs, ator.store, ator.jobs.kinds).

One loop per process: clear the wake flag → claim up to the free slots (one statement that
also rescues expired leases, so rescue runs as long as any worker runs: no separate sweeper
to stall) → start a task per job → when nothing was claimed, wait for a NOTIFY, a freed slot
or the poll interval. Handlers run concurrently (`concurrency`), each under its kind's
timeout. Completions are batched into one statement by a flusher (whatever finished while the
previous flush was in flight goes in the next); a heartbeat extends every held lease each
`lease_ttl / 3`, and a job whose lease was lost is cancelled here (another worker has it).
Kinds with a per-org limit are claimed separately under an advisory lock (store/jobs.py).

`close(grace)` stops claiming, lets running handlers finish for `grace` seconds, cancels the
rest and hands their jobs back (queued again, attempt not spent), after flushing completions.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from dataclasses import dataclass
from uuid import UUID

from ator.context import org_id_var, request_id_var
from ator.jobs.kinds import JobContext, JobKind, JobKinds, LeaseLost, Retry
from ator.obs import tracing
from ator.obs.logging import get_logger
from ator.store import jobs as job_store
from ator.store.database import Database
from ator.store.jobs import ClaimedJob
from ator.store.scope import Scope

__all__ = ["Worker", "WorkerStats"]

log = get_logger("ator.jobs.worker")


@dataclass
class WorkerStats:
    claims: int = 0
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0
    lost: int = 0
    released: int = 0


class Worker:
    def __init__(
        self,
        db: Database,
        kinds: JobKinds,
        *,
        owner: str,
        concurrency: int = 50,
        batch: int = 100,
        lease_ttl: float = 30.0,
        poll_interval: float = 1.0,
        keep_done: float = 86_400.0,
        keep_dead: float = 14 * 86_400.0,
        prune_interval: float = 60.0,
    ) -> None:
        self.db = db
        self.kinds = kinds
        self.owner = owner
        self.concurrency = concurrency
        self.batch = batch
        self.lease_ttl = lease_ttl
        self.poll_interval = poll_interval
        self.keep_done = keep_done
        self.keep_dead = keep_dead
        self.prune_interval = prune_interval
        self.stats = WorkerStats()
        self._free: list[JobKind] = []  # the kinds, read at start (registered until then)
        self._limited: list[JobKind] = []
        self._cursor: UUID | None = None
        self._held: dict[int, int] = {}  # job id → attempt, until its outcome is written
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._done: list[tuple[int, int]] = []
        self._wake = asyncio.Event()
        self._slot = asyncio.Event()
        self._flush = asyncio.Event()
        self._stopping = False
        self._next_prune = 0.0
        self._loops: list[asyncio.Task[None]] = []

    def wake(self) -> None:
        """Look for work now (called on NOTIFY; tests may call it)."""
        self._wake.set()

    async def start(self) -> None:
        self._free = [k for k in self.kinds if k.per_org_limit is None]
        self._limited = [k for k in self.kinds if k.per_org_limit is not None]
        if not len(self.kinds):
            log.info("no job kinds registered: the worker only rescues and prunes")
        self._loops = [asyncio.create_task(self._claim_loop(), name="ator-jobs-claim"),
                       asyncio.create_task(self._flush_loop(), name="ator-jobs-flush"),
                       asyncio.create_task(self._beat_loop(), name="ator-jobs-heartbeat"),
                       asyncio.create_task(self._listen_loop(), name="ator-jobs-listen")]

    async def close(self, grace: float = 10.0) -> None:
        """Stop: finish what runs within `grace` seconds, hand back the rest."""
        self._stopping = True
        self._wake.set()
        self._slot.set()
        if not self._loops:
            return
        claim_loop, flush_loop, *others = self._loops
        await claim_loop
        running = list(self._tasks.values())
        if running:
            _, late = await asyncio.wait(running, timeout=grace)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self._flush.set()
        await flush_loop  # it writes what is left, then ends
        await self._flush_now()  # what finished after it ended
        for task in others:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._held:
            held = list(self._held.items())
            self.stats.released += await job_store.release(self.db, self.owner, held)
            self._held.clear()

    # The claim loop -------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            self._slot.clear()
            free = self.concurrency - len(self._tasks)
            got = 0
            if free > 0:
                try:
                    got = await self._claim(min(free, self.batch))
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("job claim failed; retrying after the poll interval")
                await self._maybe_prune()
            if self._stopping:
                return
            full = len(self._tasks) >= self.concurrency
            if got and not full:
                continue  # there may be more: claim again at once
            waiter = self._slot if full else self._wake
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_interval):
                    await waiter.wait()

    async def _claim(self, room: int) -> int:
        got = 0
        for kinds, claim in ((self._free, job_store.claim),
                             (self._limited, job_store.claim_serialized)):
            if not kinds or room - got <= 0:
                continue
            jobs = await claim(self.db, owner=self.owner, kinds=[k.name for k in kinds],
                               limits=[k.per_org_limit for k in kinds], batch=room - got,
                               ttl=self.lease_ttl, cursor=self._cursor)
            self.stats.claims += 1
            for job in jobs:
                self._start(job)
            if jobs:
                self._cursor = jobs[-1].org_id
            got += len(jobs)
        self.stats.claimed += got
        return got

    def _start(self, job: ClaimedJob) -> None:
        self._held[job.id] = job.attempt
        task = asyncio.create_task(self._run(job, self.kinds.get(job.kind)),
                                   name=f"ator-job-{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(functools.partial(self._ended, job.id))

    def _ended(self, job_id: int, _task: asyncio.Task[None]) -> None:
        self._tasks.pop(job_id, None)
        self._slot.set()

    async def _run(self, job: ClaimedJob, kind: JobKind) -> None:
        org_id_var.set(str(job.org_id))  # this task's own context copy
        request_id_var.set(job.request_id)
        ctx = JobContext(id=job.id, kind=job.kind, scope=Scope(job.org_id),
                         attempt=job.attempt, max_attempts=job.max_attempts,
                         request_id=job.request_id, db=self.db, owner=self.owner,
                         schedule_id=job.schedule_id, tick=job.tick)
        try:
            # A job continues the trace of whoever enqueued it (another process, often).
            with tracing.span(f"job {job.kind}", {
                    "ator.job.id": job.id, "ator.job.kind": job.kind,
                    "ator.job.attempt": job.attempt, "ator.org_id": str(job.org_id),
                    "ator.request_id": job.request_id},
                    parent=job.traceparent, kind="consumer"):
                async with asyncio.timeout(kind.timeout):
                    await kind.handler(ctx, job.payload)
        except Retry as exc:
            await self._failed(job, exc.after, f"retry requested: {exc}")
        except TimeoutError:
            await self._failed(job, kind.backoff(job.attempt),
                               f"timed out after {kind.timeout:g}s")
        except LeaseLost:
            self.stats.lost += 1
            self._held.pop(job.id, None)
        except Exception as exc:  # a handler's failure is the job's, never the worker's
            await self._failed(job, kind.backoff(job.attempt), f"{type(exc).__name__}: {exc}")
        else:
            if ctx.completed:
                self.stats.completed += 1
                self._held.pop(job.id, None)
            else:
                self._done.append((job.id, job.attempt))
                self._flush.set()

    async def _failed(self, job: ClaimedJob, delay: float, error: str) -> None:
        try:
            state = await job_store.fail(self.db, self.owner, job.id, job.attempt,
                                         delay=delay, error=error)
        except asyncio.CancelledError:
            raise
        except Exception:  # the lease expires and the attempt is retried by the rescue
            log.exception("could not record a failed job attempt", extra={"job_id": job.id})
            return
        finally:
            self._held.pop(job.id, None)
        self.stats.failed += 1
        if state == "dead":
            self.stats.dead += 1
            log.warning("job is dead", extra={"job_id": job.id, "kind": job.kind,
                                              "error": error})

    # Completions, heartbeats, wake-ups, pruning ------------------------------------------

    async def _flush_loop(self) -> None:
        while not self._stopping or self._done:
            await self._flush.wait()
            self._flush.clear()
            try:
                await self._flush_now()
            except asyncio.CancelledError:
                raise
            except Exception:  # the leases expire and those jobs run again (at-least-once)
                log.exception("could not record completed jobs")

    async def _flush_now(self) -> None:
        done, self._done = self._done, []
        if not done:
            return
        try:
            ours = await job_store.complete_many(self.db, self.owner, done)
        finally:
            for job_id, _ in done:
                self._held.pop(job_id, None)
        self.stats.completed += len(ours)
        self.stats.lost += len(done) - len(ours)

    async def _beat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            ids = list(self._held)
            if not ids:
                continue
            try:
                kept = await job_store.heartbeat(self.db, self.owner, ids, self.lease_ttl)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("job heartbeat failed")
                continue
            for job_id in ids:
                if job_id in kept or job_id not in self._held:
                    continue  # still ours, or its outcome was written meanwhile
                self._held.pop(job_id, None)
                self.stats.lost += 1
                task = self._tasks.get(job_id)
                if task is not None:  # another worker runs it now: stop our copy
                    log.warning("lost the lease of a running job", extra={"job_id": job_id})
                    task.cancel()

    async def _listen_loop(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with job_store.listen(self.db, self.wake) as lost:
                    backoff = 0.5
                    self.wake()  # anything enqueued before LISTEN took effect
                    await lost.wait()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("LISTEN for jobs failed; polling meanwhile", exc_info=True)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)

    async def _maybe_prune(self) -> None:
        now = time.monotonic()
        if now < self._next_prune:
            return
        self._next_prune = now + self.prune_interval
        try:
            pruned = (await job_store.prune(self.db, state="done", age=self.keep_done)
                      + await job_store.prune(self.db, state="dead", age=self.keep_dead))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pruning finished jobs failed")
            return
        if pruned:
            log.info("pruned finished jobs", extra={"pruned": pruned})
