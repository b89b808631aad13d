"""Schedules: cron rows that enqueue jobs, one firing per tick across replicas (layer: jobs;
imports cronsim, ator.errors, ator.obs, ator.store, ator.jobs.clock, ator.jobs.kinds).

Cron is evaluated by cronsim (Healthchecks.io's evaluator: small, no dependencies, and its
DST rules are cronie's): in the schedule's IANA zone, a wall time skipped at spring-forward
fires right after the jump (02:30 → 03:00), a wall time repeated at fall-back fires once for
a job with a fixed hour (01:30 daily runs at the first 01:30) and twice for one whose hour is
a wildcard (each of the two real hours). Ticks are stored in UTC.

Each pass (`Scheduler.tick`) locks the due rows (store/schedules.py), enqueues their jobs and
advances `next_tick` in one transaction. Per due row:
- **catch-up**: ticks later than `catch_up` seconds are skipped (a scheduler that was down
  an hour does not fire 60 per-minute ticks); ticks within the window all fire, in order.
- **overlap** (a firing is active while its job is queued or running): `skip` drops a tick
  while the previous firing is active; `buffer` keeps the latest such tick and fires it as
  soon as the active one ends (one buffered at most); `allow` always fires.
  `skip`/`buffer` use the job's unique key `schedule:<id>`, so "active" is checked by the
  same index that makes it true.
Jobs carry `schedule_id` and `tick`; (schedule, tick) is unique on the jobs table too.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ator.errors import NotFound, ValidationFailed
from ator.jobs.clock import Clock, SystemClock
from ator.jobs.kinds import JobKinds
from ator.obs.logging import get_logger
from ator.store import jobs as job_store
from ator.store import schedules as schedule_store
from ator.store.database import Connection, Database
from ator.store.jobs import NewJob
from ator.store.schedules import ScheduleRow
from ator.store.scope import Scope

__all__ = ["OVERLAP", "Scheduler", "Schedules", "ticks"]

log = get_logger("ator.jobs.schedules")
OVERLAP = ("skip", "buffer", "allow")
_DEFAULT_ATTEMPTS = 5


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed(f"unknown time zone {name!r} (an IANA name, e.g. Europe/Berlin)",
                               code="invalid_zone") from None


def ticks(cron: str, zone: str, after: datetime) -> Iterator[datetime]:
    """The schedule's ticks strictly after `after`, as UTC datetimes, in order."""
    tz = _zone(zone)
    start = after.astimezone(UTC)
    # cronsim starts from local wall time; near a fall-back it may yield the earlier of two
    # equal wall times, so compare in UTC and skip what is not after `start`.
    for local in CronSim(cron, start.astimezone(tz)):
        tick = local.astimezone(UTC)
        if tick > start:
            yield tick


def _check_cron(cron: str) -> None:
    try:
        CronSim(cron, datetime.now(UTC))
    except CronSimError as exc:
        raise ValidationFailed(f"invalid cron expression {cron!r}: {exc}",
                               code="invalid_cron") from None


class Schedules:
    """Creating, listing, pausing, resuming and deleting an org's schedules (another org's
    schedule is the plain NotFound `not_found`, like any other org's record)."""

    def __init__(self, db: Database, kinds: JobKinds, clock: Clock | None = None) -> None:
        self.db = db
        self.kinds = kinds
        self.clock = clock or SystemClock()

    async def create(
        self, scope: Scope, *, name: str, kind: str, cron: str, zone: str = "UTC",
        payload: dict[str, Any] | None = None, overlap: str = "skip", catch_up: float = 60.0,
    ) -> ScheduleRow:
        """Raises ValidationFailed (bad cron, zone, overlap or window), ConfigError (a kind
        nobody registered) or Conflict (the name is taken)."""
        self.kinds.get(kind)
        _check_cron(cron)
        if overlap not in OVERLAP:
            raise ValidationFailed(f"overlap must be one of {', '.join(OVERLAP)}",
                                   code="invalid_overlap")
        if not 0 <= catch_up <= 366 * 86_400:
            raise ValidationFailed("catch_up is seconds between 0 and a year",
                                   code="invalid_catch_up")
        first = next(ticks(cron, zone, self.clock.now()))
        return await schedule_store.create(
            self.db, scope, id=uuid.uuid4(), name=name, kind=kind, payload=payload or {},
            cron=cron, zone=zone, overlap=overlap, catch_up=catch_up, next_tick=first)

    async def page(self, scope: Scope, *, after: str | None = None,
                   limit: int = 50) -> list[ScheduleRow]:
        """A page of the org's schedules by name, after the name `after`."""
        return await schedule_store.page(self.db, scope, after=after, limit=limit)

    async def list(self, scope: Scope) -> list[ScheduleRow]:
        return await schedule_store.list_for(self.db, scope)

    async def get(self, scope: Scope, schedule_id: UUID) -> ScheduleRow:
        found = await schedule_store.get(self.db, scope, schedule_id)
        if found is None:
            raise NotFound("no such schedule")
        return found

    async def pause(self, scope: Scope, schedule_id: UUID) -> ScheduleRow:
        """Stop firing (idempotent); a buffered tick is dropped."""
        return await self._enable(scope, schedule_id, False)

    async def resume(self, scope: Scope, schedule_id: UUID) -> ScheduleRow:
        """Fire again from the first tick after now (idempotent)."""
        return await self._enable(scope, schedule_id, True)

    async def _enable(self, scope: Scope, schedule_id: UUID, enabled: bool) -> ScheduleRow:
        row = await self.get(scope, schedule_id)
        if row.enabled == enabled:
            return row
        first = next(ticks(row.cron, row.zone, self.clock.now())) if enabled else None
        found = await schedule_store.set_enabled(self.db, scope, schedule_id, enabled=enabled,
                                                 next_tick=first)
        if found is None:
            raise NotFound("no such schedule")
        return found

    async def delete(self, scope: Scope, schedule_id: UUID) -> None:
        if not await schedule_store.delete(self.db, scope, schedule_id):
            raise NotFound("no such schedule")


class Scheduler:
    """Fires due schedules; every replica runs one (they agree through row locks)."""

    def __init__(
        self, db: Database, kinds: JobKinds, *, clock: Clock | None = None,
        interval: float = 1.0, batch: int = 100,
    ) -> None:
        self.db = db
        self.kinds = kinds
        self.clock = clock or SystemClock()
        self.interval = interval
        self.batch = batch
        self.fired = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ator-scheduler")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            try:
                while await self.tick() >= self.batch:
                    pass  # a full batch: there may be more due right now
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("scheduler pass failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> int:
        """One pass at `clock.now()`; returns how many schedules it acted on."""
        now = self.clock.now()
        async with self.db.begin() as conn:
            rows = await schedule_store.due(conn, now, self.batch)
            for row in rows:
                await self._fire(conn, row, now)
        return len(rows)

    async def _fire(self, conn: Connection, row: ScheduleRow, now: datetime) -> None:
        window_start = now - timedelta(seconds=row.catch_up)
        fires: list[datetime] = []
        if row.next_tick <= now:
            if row.next_tick < window_start:
                log.warning("schedule missed ticks beyond its catch-up window",
                            extra={"schedule_id": str(row.id), "since": row.next_tick.isoformat()})
                # Ticks at or after the window's start still fire.
                start = window_start - timedelta(microseconds=1)
            else:
                start = row.next_tick - timedelta(microseconds=1)
            for tick in ticks(row.cron, row.zone, start):
                if tick > now:
                    break
                fires.append(tick)
        pending = row.pending
        if pending is not None and await self._enqueue(conn, row, pending):
            pending = None
        for tick in fires:
            if not await self._enqueue(conn, row, tick) and row.overlap == "buffer":
                pending = tick  # the latest tick waits for the active firing to end
        next_tick = row.next_tick if row.next_tick > now else next(ticks(row.cron, row.zone, now))
        await schedule_store.advance(conn, row, next_tick=next_tick,
                                     last_tick=fires[-1] if fires else row.last_tick,
                                     pending=pending)

    async def _enqueue(self, conn: Connection, row: ScheduleRow, tick: datetime) -> bool:
        spec = self.kinds.get(row.kind) if row.kind in self.kinds else None
        job = NewJob(kind=row.kind, payload=row.payload,
                     max_attempts=spec.max_attempts if spec else _DEFAULT_ATTEMPTS,
                     priority=spec.priority if spec else 0,
                     unique_key=None if row.overlap == "allow" else f"schedule:{row.id}",
                     schedule_id=row.id, tick=tick)
        fired = await job_store.enqueue(conn, Scope(row.org_id), job) is not None
        self.fired += fired
        return fired
