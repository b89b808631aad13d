"""Schedules on real PostgreSQL with a controlled clock: one firing per tick across two
replicas, DST days in America/New_York and Europe/Berlin, the catch-up window, and the
overlap policies (skip / buffer / allow)."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from ator import Ator
from ator.errors import ValidationFailed
from ator.jobs import JobContext, JobKind, JobKinds, ManualClock, Scheduler, Schedules, Worker
from ator.store.database import Database, open_database
from ator.store.scope import Scope


async def _nothing(ctx: JobContext, payload: dict[str, Any]) -> None:
    return None


@pytest.fixture
async def scope(make_ator: Any) -> AsyncIterator[Scope]:
    async with make_ator(engine=False) as ator:
        assert isinstance(ator, Ator)
        made = await ator.create_org(f"sched-{uuid.uuid4().hex[:6]}")
        yield Scope(made.id)
        # Left enabled, these schedules would fire on the real clock of any later worker.
        await ator.db.write(sa.text("DELETE FROM schedules WHERE org_id = :o"), {"o": made.id})
        await ator.db.write(sa.text("DELETE FROM jobs WHERE org_id = :o"), {"o": made.id})


@pytest.fixture
async def dbs(settings_factory: Any) -> AsyncIterator[list[Database]]:
    """Two pools: two replicas' database access."""
    opened = [await open_database(settings_factory()) for _ in range(2)]
    yield opened
    for db in opened:
        await db.close()


async def fired(db: Database, schedule_id: uuid.UUID) -> list[datetime]:
    rows = await db.pool.fetch("SELECT tick FROM jobs WHERE schedule_id = $1 ORDER BY tick",
                               schedule_id)
    return [r["tick"] for r in rows]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


async def test_two_replicas_fire_a_per_minute_schedule_once_per_tick(
    dbs: list[Database], scope: Scope
) -> None:
    kinds = JobKinds([JobKind("minutely", _nothing)])
    clock = ManualClock(utc(2026, 6, 1, 12, 0, 30))
    schedule = await Schedules(dbs[0], kinds, clock).create(
        scope, name="minutely", kind="minutely", cron="* * * * *", overlap="allow")
    replicas = [Scheduler(db, kinds, clock=clock) for db in dbs]
    for _ in range(5 * 12):  # five minutes in 5-second steps, both replicas each step
        clock.advance(5)
        await asyncio.gather(*(r.tick() for r in replicas))
    # One job row per firing: a tick fired twice would show twice here. (The replicas'
    # own counters also count other modules' schedules left in the shared test database.)
    assert await fired(dbs[0], schedule.id) == [utc(2026, 6, 1, 12, m) for m in range(1, 6)]


async def _sweep(db: Database, scope: Scope, zone: str, start: datetime,
                 end: datetime) -> dict[str, list[datetime]]:
    """Run one scheduler over [start, end] in 15-minute steps; the firings per schedule."""
    kinds = JobKinds([JobKind("dst", _nothing)])
    clock = ManualClock(start)
    schedules = Schedules(db, kinds, clock)
    made = {}
    for name, cron in (("daily-0130", "30 1 * * *"), ("daily-0230", "30 2 * * *"),
                       ("hourly", "30 * * * *")):
        made[name] = await schedules.create(scope, name=f"{zone}-{name}-{start:%m}", kind="dst",
                                            cron=cron, zone=zone, overlap="allow",
                                            catch_up=3600)
    scheduler = Scheduler(db, kinds, clock=clock)
    while clock.now() < end:
        clock.advance(15 * 60)
        await scheduler.tick()
    return {name: await fired(db, row.id) for name, row in made.items()}


def _local_day(ticks: list[datetime], zone: str, day: datetime) -> list[datetime]:
    tz = ZoneInfo(zone)
    return [t for t in ticks if t.astimezone(tz).date() == day.date()]


@pytest.mark.parametrize(("zone", "day", "daily_0130", "daily_0230", "hours"), [
    # Spring forward: 02:00 EST → 03:00 EDT. 02:30 does not exist: it fires at 03:00 EDT.
    ("America/New_York", datetime(2026, 3, 8), utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 7, 0),
     23),
    # Fall back: 02:00 EDT → 01:00 EST. 01:30 happens twice: a daily job fires once (the
    # first); the hourly one fires in both real hours.
    ("America/New_York", datetime(2026, 11, 1), utc(2026, 11, 1, 5, 30),
     utc(2026, 11, 1, 7, 30), 25),
    # Spring forward: 02:00 CET → 03:00 CEST.
    ("Europe/Berlin", datetime(2026, 3, 29), utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 0),
     23),
    # Fall back: 03:00 CEST → 02:00 CET. 02:30 happens twice: the daily one fires once.
    ("Europe/Berlin", datetime(2026, 10, 25), utc(2026, 10, 24, 23, 30),
     utc(2026, 10, 25, 0, 30), 25),
])
async def test_dst_days_give_the_right_firings(
    dbs: list[Database], scope: Scope, zone: str, day: datetime, daily_0130: datetime,
    daily_0230: datetime, hours: int,
) -> None:
    tz = ZoneInfo(zone)
    start = datetime(day.year, day.month, day.day, tzinfo=tz) - timedelta(hours=12)
    end = start + timedelta(hours=48)
    got = await _sweep(dbs[0], scope, zone, start, end)
    assert _local_day(got["daily-0130"], zone, day) == [daily_0130]
    assert _local_day(got["daily-0230"], zone, day) == [daily_0230]
    hourly = _local_day(got["hourly"], zone, day)
    assert len(hourly) == hours and len(set(hourly)) == hours
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(hourly))
    # The days around it keep their one daily firing each.
    assert len(got["daily-0130"]) == len(got["daily-0230"]) == 2


async def test_a_missed_window_fires_only_the_ticks_within_catch_up(
    dbs: list[Database], scope: Scope
) -> None:
    kinds = JobKinds([JobKind("late", _nothing)])
    clock = ManualClock(utc(2026, 6, 1, 12, 0, 30))
    schedule = await Schedules(dbs[0], kinds, clock).create(
        scope, name="late", kind="late", cron="* * * * *", overlap="allow", catch_up=180)
    scheduler = Scheduler(dbs[0], kinds, clock=clock)
    clock.advance(10 * 60)  # the scheduler was down from 12:00:30 to 12:10:30
    await scheduler.tick()
    assert await fired(dbs[0], schedule.id) == [utc(2026, 6, 1, 12, m) for m in (8, 9, 10)]
    clock.advance(60)
    await scheduler.tick()
    assert (await fired(dbs[0], schedule.id))[-1] == utc(2026, 6, 1, 12, 11)


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(("overlap", "expected"), [
    ("skip", [1, 4]),  # ticks 2 and 3 fell while tick 1's job ran: dropped
    ("buffer", [1, 3, 4]),  # the latest of them (3) waited and ran after tick 1's job
    ("allow", [1, 2, 3, 4]),
])
async def test_overlap_policies(dbs: list[Database], scope: Scope, overlap: str,
                                expected: list[int]) -> None:
    gate = asyncio.Event()
    ran: list[datetime] = []

    async def slow(ctx: JobContext, payload: dict[str, Any]) -> None:
        assert ctx.tick is not None
        ran.append(ctx.tick)
        if len(ran) == 1:
            await gate.wait()

    kinds = JobKinds([JobKind("slow", slow)])
    clock = ManualClock(utc(2026, 6, 1, 12, 0, 30))
    schedule = await Schedules(dbs[0], kinds, clock).create(
        scope, name=f"overlap-{overlap}", kind="slow", cron="* * * * *", overlap=overlap)
    scheduler = Scheduler(dbs[0], kinds, clock=clock)
    worker = Worker(dbs[0], kinds, owner=f"w-{overlap}", poll_interval=0.05)
    await worker.start()
    try:
        async def ran_count(n: int) -> bool:
            return len(ran) >= n

        for minute in (1, 2, 3):
            clock.set(utc(2026, 6, 1, 12, minute, 1))
            await scheduler.tick()
            await wait_until(lambda: ran_count(1))
        gate.set()  # tick 1's job ends
        await wait_until(lambda: _no_active(dbs[0], schedule.id))
        await scheduler.tick()  # a buffered tick fires now, between ticks
        await wait_until(lambda: _no_active(dbs[0], schedule.id))
        clock.set(utc(2026, 6, 1, 12, 4, 1))
        await scheduler.tick()
        await wait_until(lambda: ran_count(len(expected)))
        await wait_until(lambda: _no_active(dbs[0], schedule.id))
    finally:
        await worker.close(grace=1)
    assert sorted(t.minute for t in ran) == expected


async def _no_active(db: Database, schedule_id: uuid.UUID) -> bool:
    return await db.pool.fetchval(
        "SELECT count(*) FROM jobs WHERE schedule_id = $1 AND state IN ('queued','running')",
        schedule_id) == 0


async def test_bad_schedules_are_refused_with_a_code(dbs: list[Database], scope: Scope) -> None:
    schedules = Schedules(dbs[0], JobKinds([JobKind("k", _nothing)]))
    for bad, code in (({"cron": "61 * * * *"}, "invalid_cron"),
                      ({"cron": "* * * * *", "zone": "Mars/Olympus"}, "invalid_zone"),
                      ({"cron": "* * * * *", "overlap": "queue"}, "invalid_overlap")):
        with pytest.raises(ValidationFailed) as err:
            await schedules.create(scope, name="bad", kind="k", **bad)
        assert err.value.code == code
