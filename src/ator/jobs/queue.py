"""Enqueueing and inspecting jobs (layer: jobs; imports ator.context, ator.errors,
ator.store, ator.jobs.kinds).

`JobQueue.enqueue` writes one job for an org; pass `within=conn` (a `Database.begin()`
connection) to write it in the caller's transaction, so it exists if and only if the
caller's own rows commit (an outbox). The request id defaults to the one in the logging
context. A `unique_key` is unique per (org, kind) among queued and running jobs: enqueueing
it again meanwhile returns None; once the first is done or dead the key is free again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ator.context import request_id_var
from ator.errors import NotFound
from ator.jobs.kinds import JobKinds
from ator.obs import tracing
from ator.store import jobs as job_store
from ator.store.database import Connection, Database
from ator.store.jobs import JobRow, NewJob
from ator.store.scope import Scope

__all__ = ["JobQueue"]


class JobQueue:
    def __init__(self, db: Database, kinds: JobKinds) -> None:
        self.db = db
        self.kinds = kinds

    async def enqueue(
        self,
        scope: Scope,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        unique_key: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        request_id: str | None = None,
        within: Connection | None = None,
    ) -> int | None:
        """Queue a job; returns its id, or None when `unique_key` is already active.
        Raises ConfigError for a kind no feature registered."""
        spec = self.kinds.get(kind)
        job = NewJob(kind=kind, payload=payload or {}, max_attempts=spec.max_attempts,
                     priority=spec.priority if priority is None else priority, run_at=run_at,
                     unique_key=unique_key, request_id=request_id or request_id_var.get(),
                     traceparent=tracing.traceparent())
        return await job_store.enqueue(within or self.db, scope, job)

    async def enqueue_many(
        self, scope: Scope, kind: str, payloads: Sequence[dict[str, Any]], *,
        within: Connection | None = None,
    ) -> int:
        """Queue many jobs of one kind in one statement (no unique keys); returns how many.
        `within=conn` writes them in the caller's transaction, as for `enqueue`."""
        spec = self.kinds.get(kind)
        return await job_store.enqueue_many(within or self.db, scope, kind, payloads,
                                            max_attempts=spec.max_attempts,
                                            priority=spec.priority,
                                            request_id=request_id_var.get(),
                                            traceparent=tracing.traceparent())

    async def get(self, scope: Scope, job_id: int) -> JobRow:
        """The job's state; another org's job is NotFound."""
        row = await job_store.get(self.db, scope, job_id)
        if row is None:
            raise NotFound("no such job", code="job_not_found")
        return row

    async def replay(self, scope: Scope, job_id: int) -> None:
        """Run a dead job again with fresh attempts. Raises NotFound / Conflict."""
        await self.get(scope, job_id)
        await job_store.replay(self.db, scope, job_id)

    async def counts(self, scope: Scope, kind: str | None = None) -> dict[str, int]:
        """Jobs of the org by state."""
        return await job_store.counts(self.db, scope, kind)
