"""The retention service: an org's policy, what will go when, purging, the audit and the
export of a thread (layer: retention; imports ator.errors, ator.jobs, ator.settings,
ator.store, ator.retention.*).

Reached as `ator.service(Retention)`. The purge runs as the job kind `retention.purge` on
each org's schedule `ator.retention` (the operator's `retention_cron`, UTC), made for every
org that has none when the engine starts, when a pass runs and when the org reads or sets
its policy. `purge_now` runs a pass at once (the operator's CLI, tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from ator.errors import NotFound
from ator.jobs import Clock, JobContext, JobKind, SystemClock
from ator.jobs.schedules import ticks
from ator.retention.policy import CLASSES, Policy
from ator.retention.purger import Purger, PurgeReport
from ator.settings import Settings
from ator.store import retention as store
from ator.store.database import Database
from ator.store.retention import Bounds, PurgeRecord
from ator.store.scope import Scope

__all__ = ["KIND", "SCHEDULE", "Retention", "RetentionReport"]

KIND = "retention.purge"
SCHEDULE = "ator.retention"


@dataclass(frozen=True, slots=True)
class RetentionReport:
    """What the org keeps and what its next pass removes."""

    policy: Policy
    defaults: Policy
    bounds: tuple[int, int]
    next_run: datetime | None
    last_run: datetime | None
    due: dict[str, dict[str, Any]]
    jobs: dict[str, float]


class Retention:
    def __init__(self, db: Database, settings: Settings, *, clock: Clock | None = None,
                 bounds: Bounds | None = None) -> None:
        self.db = db
        self.settings = settings
        self.clock = clock or SystemClock()
        self.bounds = bounds or Bounds(batch=settings.retention_batch,
                                       statement_timeout=settings.retention_statement_timeout)

    def kind(self) -> JobKind:
        return JobKind(KIND, self._run, max_attempts=3, timeout=3600.0, per_org_limit=1)

    async def _run(self, ctx: JobContext, _payload: dict[str, Any]) -> None:
        await self.ensure_schedules()
        await self.purge_now(ctx.scope)

    async def ensure_schedules(self) -> int:
        """Give every org without one its purge schedule."""
        first = next(ticks(self.settings.retention_cron, "UTC", self.clock.now()))
        return await store.ensure_schedules(self.db, name=SCHEDULE, kind=KIND,
                                            cron=self.settings.retention_cron, next_tick=first)

    async def policy(self, scope: Scope) -> Policy:
        return Policy.effective(self.settings, await store.get_policy(self.db, scope))

    async def set_policy(self, scope: Scope, changes: dict[str, Any]) -> Policy:
        """Set the org's own values (None: back to the operator's default). Raises
        ValidationFailed for an unknown class or a value out of the operator's bounds."""
        checked = Policy.check(self.settings, changes)
        own = await store.get_policy(self.db, scope)
        for name, value in checked.items():
            if value is None:
                own.pop(name, None)
            else:
                own[name] = value
        await store.set_policy(self.db, scope, own)
        await self.ensure_schedules()
        return await self.policy(scope)

    async def report(self, scope: Scope) -> RetentionReport:
        """The policy and, per class, what the next pass removes and when the oldest item
        kept today goes."""
        await self.ensure_schedules()
        policy = await self.policy(scope)
        ticks_ = await store.schedule_of(self.db, scope, SCHEDULE)
        next_run = ticks_[0] if ticks_ else None
        when = next_run or self.clock.now()
        trash_cut = when - timedelta(days=policy.trash_days)
        (threads, oldest_t), (setups, oldest_s) = await store.trash_due(self.db, scope,
                                                                       trash_cut)
        mail_cut = when - timedelta(days=policy.mailbox_days)
        mail, oldest_m = await store.consumed_mailbox_due(self.db, scope, mail_cut)
        due: dict[str, dict[str, Any]] = {
            "trash_days": {"removes": CLASSES["trash_days"], "cutoff": trash_cut,
                           "threads": threads, "setups": setups,
                           "oldest": min((d for d in (oldest_t, oldest_s) if d), default=None)},
            "mailbox_days": {"removes": CLASSES["mailbox_days"], "cutoff": mail_cut,
                             "items": mail, "oldest": oldest_m},
            "events_days": {"removes": CLASSES["events_days"],
                            "cutoff": (when - timedelta(days=policy.events_days)
                                       if policy.events_days else None)},
            "runs_days": {"removes": CLASSES["runs_days"],
                          "cutoff": when - timedelta(days=policy.runs_days)},
        }
        return RetentionReport(
            policy=policy, defaults=Policy.defaults(self.settings),
            bounds=(self.settings.retention_min_days, self.settings.retention_max_days),
            next_run=next_run, last_run=ticks_[1] if ticks_ else None, due=due,
            jobs={"done_s": self.settings.job_keep_done, "dead_s": self.settings.job_keep_dead})

    async def purge_now(self, scope: Scope) -> PurgeReport:
        """One pass for the org at the clock's now, under its policy (audited)."""
        purger = Purger(self.db, self.bounds)
        return await purger.purge(scope, await self.policy(scope), self.clock.now())

    async def audit(self, scope: Scope, *, limit: int = 100, before: int | None = None
                    ) -> list[PurgeRecord]:
        return await store.list_audit(self.db, scope, limit=limit, before=before)

    async def export_thread(self, scope: Scope, thread_id: UUID) -> dict[str, Any]:
        """A thread with its events, turns and model calls (in the trash too, until it is
        purged). Raises NotFound for another org's or a purged thread."""
        found = await store.export_thread(self.db, scope, thread_id)
        if found is None:
            raise NotFound("thread not found")
        return found
