"""The job runner: a process's worker and scheduler together (layer: jobs; imports
ator.settings, ator.store, ator.jobs.*).

`ator worker` and `ator serve` (unless `run_jobs` is off) start one; `close()` stops the
scheduler, then the worker (finish within `job_grace`, hand back the rest).
"""

from __future__ import annotations

from ator.jobs.clock import Clock
from ator.jobs.kinds import JobKinds
from ator.jobs.schedules import Scheduler
from ator.jobs.worker import Worker
from ator.settings import Settings
from ator.store.database import Database

__all__ = ["JobRunner"]


class JobRunner:
    def __init__(
        self, db: Database, kinds: JobKinds, settings: Settings, *, owner: str,
        clock: Clock | None = None,
    ) -> None:
        self.grace = settings.job_grace
        self.worker = Worker(
            db, kinds, owner=f"{owner}:jobs", concurrency=settings.job_concurrency,
            batch=settings.job_batch, lease_ttl=settings.job_lease_ttl,
            poll_interval=settings.job_poll_interval, keep_done=settings.job_keep_done,
            keep_dead=settings.job_keep_dead)
        self.scheduler = Scheduler(db, kinds, clock=clock, interval=settings.schedule_interval)
        self._started = False

    @property
    def running(self) -> bool:
        return self._started

    async def start(self) -> None:
        if not self._started:
            await self.worker.start()
            self.scheduler.start()
            self._started = True

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self.scheduler.close()
            await self.worker.close(self.grace)
