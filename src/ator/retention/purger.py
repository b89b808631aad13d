"""Purging one org under its policy (layer: retention; imports ator.obs, ator.store,
ator.retention.policy).

A pass at `now` removes, in this order: the trash (each subtree of deleted threads with all
that hangs off it, then archived setups no thread uses), the events of idle threads, the
consumed mailbox items, the finished workflow runs. Every statement is bounded
(store/retention.py); each thread, setup and class that went is one row of the purge audit.
A pass may stop after `max_subjects` threads and setups (the next pass goes on), so one
org's backlog never holds a worker for long.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ator.obs.logging import get_logger
from ator.retention.policy import Policy
from ator.store import retention as store
from ator.store.database import Database
from ator.store.retention import Bounds, Timing
from ator.store.scope import Scope

__all__ = ["PurgeReport", "Purger"]

log = get_logger("ator.retention")


@dataclass(slots=True)
class PurgeReport:
    threads: int = 0
    setups: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    timing: Timing = field(default_factory=Timing)
    more: bool = False  # stopped at max_subjects: the next pass goes on

    def add(self, rows: dict[str, int]) -> None:
        for table, n in rows.items():
            self.rows[table] = self.rows.get(table, 0) + n


class Purger:
    def __init__(self, db: Database, bounds: Bounds, *, max_subjects: int = 1000) -> None:
        self.db = db
        self.bounds = bounds
        self.max_subjects = max_subjects

    async def purge(self, scope: Scope, policy: Policy, now: datetime) -> PurgeReport:
        report = PurgeReport()
        await self._trash(scope, now - timedelta(days=policy.trash_days), report)
        if policy.events_days:
            await self._history(scope, now - timedelta(days=policy.events_days), report)
        for what, days in (("mailbox", policy.mailbox_days), ("runs", policy.runs_days)):
            cutoff = now - timedelta(days=days)
            n = await store.delete_aged(self.db, scope, what, cutoff, bounds=self.bounds,
                                        timing=report.timing)
            if n:
                report.add({what: n})
                await store.audit(self.db, scope, what, None, cutoff, {what: n})
        if report.rows:
            log.info("purged", extra={"org_id": str(scope.org_id), "rows": report.rows})
        return report

    async def _trash(self, scope: Scope, cutoff: datetime, report: PurgeReport) -> None:
        while report.threads + report.setups < self.max_subjects:
            tops = await store.expired_threads(self.db, scope, cutoff, 100)
            for top in tops:
                ids = await store.subtree(self.db, scope, top)
                rows = await store.delete_thread_rows(self.db, scope, ids, bounds=self.bounds,
                                                      timing=report.timing)
                await store.audit(self.db, scope, "thread", top, cutoff, rows)
                report.add(rows)
                report.threads += 1
            if len(tops) < 100:
                break
        else:
            report.more = True
            return
        for setup_id in await store.expired_setups(self.db, scope, cutoff,
                                                   self.max_subjects - report.threads):
            rows = await store.delete_setup(self.db, scope, setup_id, bounds=self.bounds,
                                            timing=report.timing)
            await store.audit(self.db, scope, "setup", setup_id, cutoff, rows)
            report.add(rows)
            report.setups += 1

    async def _history(self, scope: Scope, cutoff: datetime, report: PurgeReport) -> None:
        ids = await store.idle_threads(self.db, scope, cutoff, self.max_subjects)
        for start in range(0, len(ids), 100):
            chunk = ids[start:start + 100]
            rows = await store.delete_history(self.db, chunk, bounds=self.bounds,
                                              timing=report.timing)
            if rows:
                await store.audit(self.db, scope, "events", None, cutoff,
                                  {**rows, "threads": len(chunk)})
                report.add(rows)
