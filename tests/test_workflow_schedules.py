"""Schedules of workflow runs on real PostgreSQL with a controlled clock: a per-minute
schedule on two replicas starts one run per tick, overlap `skip` skips while the previous
run is still going, a DST fall-back day gives no duplicate run, a scheduled run keeps its
wall-clock budget; and the `/v1/schedules` routes (roles, problems, another org's 404).

The clock tests run on a database of their own, made for the test: the session's database
holds other tests' schedules (due at any controlled time) and, in the session's one event
loop, any scheduler another test left running on the real clock would find these
schedules due (their ticks are in the past) and move them past the test's clock. Here the
only schedulers are the test's own, every time they use is the test's clock, and what the
test counts is its own schedule's rows.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import httpx
import pytest

from ator.engine.runtime import Ator
from ator.jobs import JobKinds, ManualClock, Scheduler, Schedules
from ator.store.database import Database, open_database
from ator.store.scope import Scope
from ator.workflows import RunSchedules, Workflows
from ator.workflows.scheduled import run_key
from tests.conftest import operator_client


@pytest.fixture
async def runtime(make_ator: Any, own_database: str) -> AsyncIterator[Ator]:
    """A runtime on the test's own database whose job worker runs, without its own
    scheduler (that one would run on the real clock: the tests' schedulers run on a
    controlled clock instead)."""
    async with make_ator(database_url=own_database, job_poll_interval=0.05,
                         job_concurrency=20) as ator:
        worker = ator.engine.job_runner.worker
        await worker.start()
        try:
            yield ator
        finally:
            await worker.close(1)


@pytest.fixture
async def replica_dbs(settings_factory: Any, runtime: Ator,
                      own_database: str) -> AsyncIterator[list[Database]]:
    """Two more handles on the test's database (after `runtime` migrated it): the
    replicas' schedulers."""
    opened = [await open_database(settings_factory(database_url=own_database))
              for _ in range(2)]
    yield opened
    for db in opened:
        await db.close()


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def setup(ator: Ator, recipe: dict[str, Any],
                clock: ManualClock) -> tuple[Scope, uuid.UUID, RunSchedules]:
    org = await ator.create_org(f"sched-{uuid.uuid4().hex[:6]}")
    scope = Scope(org.id)
    flows = ator.service(Workflows)
    wf = await flows.create(scope, f"wf-{uuid.uuid4().hex[:6]}")
    await flows.publish(scope, wf["id"], recipe)
    runs = RunSchedules(Schedules(ator.db, ator.service(JobKinds), clock), flows)
    return scope, uuid.UUID(str(wf["id"])), runs


async def fired_runs(db: Database, schedule_id: uuid.UUID) -> list[Any]:
    return list(await db.pool.fetch(
        "SELECT o.tick, r.id, r.status, r.idempotency_key, r.wall_clock_s FROM run_origins o "
        "JOIN workflow_runs r ON r.id = o.run_id WHERE o.schedule_id = $1 ORDER BY o.tick",
        schedule_id))


async def no_firing_pending(db: Database, schedule_id: uuid.UUID) -> bool:
    return not await db.pool.fetchval(
        "SELECT count(*) FROM jobs WHERE schedule_id = $1 AND state IN ('queued','running')",
        schedule_id)


QUICK = {"schema": "ator.workflow/v1", "steps": [{"id": "t", "type": "transform",
                                                  "expr": "input.n + 1"}]}
SLOW = {"schema": "ator.workflow/v1", "steps": [{"id": "w", "type": "wait", "seconds": 3600}]}


async def test_two_replicas_start_one_run_per_tick(runtime: Ator,
                                                   replica_dbs: list[Database]) -> None:
    clock = ManualClock(utc(2026, 6, 1, 12, 0, 30))
    scope, wf, runs = await setup(runtime, QUICK, clock)
    schedule = await runs.create(scope, name="minutely", cron="* * * * *", zone="UTC",
                                 overlap="allow", catch_up=60, workflow_id=wf,
                                 input={"n": 1}, budget={"wall_clock_s": 120})
    kinds = runtime.service(JobKinds)
    replicas = [Scheduler(db, kinds, clock=clock) for db in replica_dbs]
    for _ in range(5 * 12):  # five minutes in 5-second steps, both replicas at each step
        clock.advance(5)
        await asyncio.gather(*(r.tick() for r in replicas))
    await wait_until(lambda: no_firing_pending(runtime.db, schedule.id))
    minutes = [utc(2026, 6, 1, 12, m) for m in range(1, 6)]
    jobs = [r["tick"] for r in await runtime.db.pool.fetch(
        "SELECT tick FROM jobs WHERE schedule_id = $1 ORDER BY tick", schedule.id)]
    assert jobs == minutes  # one firing per tick, across both replicas
    made = await fired_runs(runtime.db, schedule.id)
    assert [m["tick"] for m in made] == minutes  # and one run per firing
    # The database is the test's own: the replicas fired this schedule and nothing else,
    # and nobody else moved it on (its next tick is the test clock's next minute).
    assert sum(r.fired for r in replicas) == 5
    assert (await runs.schedules.get(scope, schedule.id)).next_tick == utc(2026, 6, 1, 12, 6)
    assert [m["idempotency_key"] for m in made] == [run_key(schedule.id, m["tick"])
                                                    for m in made]
    # The schedule's budget lowered the recipe's wall clock.
    assert {m["wall_clock_s"] for m in made} == {120.0}
    # A firing's job run again (a lost worker) finds the run it made.
    flows = runtime.service(Workflows)
    again, created = await flows.start(scope, wf, {"n": 1},
                                       key=run_key(schedule.id, made[0]["tick"]))
    assert not created and again["id"] == made[0]["id"]


async def test_a_run_starting_for_its_schedule_does_not_hide_it_from_the_scheduler(
        runtime: Ator, own_database: str) -> None:
    """A firing's run records its schedule (a foreign key), and the key check holds a KEY
    SHARE lock on the schedule until the start commits: the scheduler's pass must not
    take that for another scheduler's lock and pass the schedule over."""
    clock = ManualClock(utc(2026, 6, 1, 12, 0, 30))
    scope, wf, runs = await setup(runtime, QUICK, clock)
    schedule = await runs.create(scope, name="held", cron="* * * * *", zone="UTC",
                                 overlap="allow", catch_up=60, workflow_id=wf, input={"n": 1})
    scheduler = Scheduler(runtime.db, runtime.service(JobKinds), clock=clock)
    starting = await asyncpg.connect(own_database)
    try:
        async with starting.transaction():  # what inserting a run_origins row does
            await starting.execute("SELECT 1 FROM schedules WHERE id = $1 FOR KEY SHARE",
                                   schedule.id)
            clock.set(utc(2026, 6, 1, 12, 1, 1))
            assert await scheduler.tick() == 1
    finally:
        await starting.close()
    assert scheduler.fired == 1
    assert (await runs.schedules.get(scope, schedule.id)).next_tick == utc(2026, 6, 1, 12, 2)


async def test_overlap_skip_skips_while_the_previous_run_is_still_going(runtime: Ator) -> None:
    clock = ManualClock(utc(2026, 6, 1, 12, 0, 30))
    scope, wf, runs = await setup(runtime, SLOW, clock)
    schedule = await runs.create(scope, name="skip", cron="* * * * *", zone="UTC",
                                 overlap="skip", catch_up=60, workflow_id=wf, input={})
    scheduler = Scheduler(runtime.db, runtime.service(JobKinds), clock=clock)

    async def fire_at(minute: int) -> None:
        clock.set(utc(2026, 6, 1, 12, minute, 1))
        await scheduler.tick()
        await wait_until(lambda: no_firing_pending(runtime.db, schedule.id))

    await fire_at(1)
    first = await fired_runs(runtime.db, schedule.id)
    assert [r["status"] for r in first] == ["running"]
    await fire_at(2)
    await fire_at(3)
    assert len(await fired_runs(runtime.db, schedule.id)) == 1  # 2 and 3 were skipped
    # The kernel did fire them (their jobs ran and found the run going).
    jobs = await runtime.db.pool.fetchval(
        "SELECT count(*) FROM jobs WHERE schedule_id = $1", schedule.id)
    assert jobs == 3
    await runtime.service(Workflows).cancel(scope, first[0]["id"])
    await fire_at(4)
    made = await fired_runs(runtime.db, schedule.id)
    assert [m["tick"].minute for m in made] == [1, 4]
    assert [m["status"] for m in made] == ["cancelled", "running"]
    await runtime.service(Workflows).cancel(scope, made[1]["id"])


async def test_a_dst_fall_back_day_gives_no_duplicate_run(runtime: Ator) -> None:
    zone = "America/New_York"  # 2026-11-01: 02:00 EDT → 01:00 EST, 01:30 happens twice
    tz = ZoneInfo(zone)
    start = datetime(2026, 11, 1, tzinfo=tz) - timedelta(hours=3)
    clock = ManualClock(start)
    scope, wf, runs = await setup(runtime, QUICK, clock)
    daily = await runs.create(scope, name="daily", cron="30 1 * * *", zone=zone,
                              overlap="allow", catch_up=3600, workflow_id=wf, input={"n": 0})
    hourly = await runs.create(scope, name="hourly", cron="30 * * * *", zone=zone,
                               overlap="allow", catch_up=3600, workflow_id=wf, input={"n": 0})
    scheduler = Scheduler(runtime.db, runtime.service(JobKinds), clock=clock)
    while clock.now() < start + timedelta(hours=30):
        clock.advance(15 * 60)
        await scheduler.tick()
    for schedule in (daily, hourly):
        await wait_until(lambda s=schedule: no_firing_pending(runtime.db, s.id))

    def on_the_day(rows: list[Any]) -> list[datetime]:
        return [r["tick"] for r in rows if r["tick"].astimezone(tz).date()
                == datetime(2026, 11, 1).date()]

    daily_runs = await fired_runs(runtime.db, daily.id)
    assert on_the_day(daily_runs) == [utc(2026, 11, 1, 5, 30)]  # the first 01:30 only
    hourly_ticks = on_the_day(await fired_runs(runtime.db, hourly.id))
    assert len(hourly_ticks) == 25 == len(set(hourly_ticks))  # both real 01:30s, once each
    keys = await runtime.db.pool.fetch(
        "SELECT idempotency_key FROM workflow_runs WHERE org_id = $1", scope.org_id)
    assert len(keys) == len({k["idempotency_key"] for k in keys})


async def test_a_scheduled_runs_wall_clock_budget_still_applies(runtime: Ator) -> None:
    clock = ManualClock(utc(2026, 6, 1, 12, 0, 30))
    scope, wf, runs = await setup(runtime, SLOW, clock)
    schedule = await runs.create(scope, name="short", cron="* * * * *", zone="UTC",
                                 overlap="skip", catch_up=60, workflow_id=wf, input={},
                                 budget={"wall_clock_s": 1})
    clock.set(utc(2026, 6, 1, 12, 1, 1))
    await Scheduler(runtime.db, runtime.service(JobKinds), clock=clock).tick()
    await wait_until(lambda: no_firing_pending(runtime.db, schedule.id))
    run_id = (await fired_runs(runtime.db, schedule.id))[0]["id"]
    flows = runtime.service(Workflows)

    async def ended() -> bool:
        return (await flows.run(scope, run_id))["status"] != "running"

    await wait_until(ended, timeout=30)
    run = await flows.run(scope, run_id)
    assert (run["status"], run["fail_reason"]) == ("failed", "wall_clock")


# The routes -------------------------------------------------------------------------------


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def org_keys(client: httpx.AsyncClient, operator: str) -> dict[str, str]:
    org = (await client.post("/v1/orgs", json={"name": f"o-{uuid.uuid4().hex[:6]}"},
                             headers=auth(operator))).json()
    keys = {}
    for role in ("admin", "member", "viewer"):
        made = await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(operator),
                                 json={"name": role, "role": role, "email": f"{role}@x"})
        assert made.status_code == 201, made.text
        keys[role] = str(made.json()["key"])
    return keys


async def test_the_schedule_routes(make_ator: Any) -> None:
    async with operator_client(make_ator, rate_limit_per_minute=100_000) as (client, op, _):
        mine, theirs = await org_keys(client, op), await org_keys(client, op)
        admin = auth(mine["admin"])
        wf = (await client.post("/v1/workflows", headers=admin, json={"name": "nightly"})).json()
        await client.post(f"/v1/workflows/{wf['id']}/versions", headers=admin, json={
            "recipe": {**QUICK, "input": {"type": "object", "required": ["n"]}}})
        body = {"name": "every-night", "cron": "0 3 * * *", "zone": "Europe/Berlin",
                "overlap": "skip", "target": {"workflow_id": wf["id"], "input": {"n": 1},
                                              "budget": {"wall_clock_s": 600}}}
        for change, code in (({"cron": "61 * * * *"}, "invalid_cron"),
                             ({"zone": "Mars/Olympus"}, "invalid_zone"),
                             ({"overlap": "sometimes"}, "invalid_overlap"),
                             ({"catch_up": -1}, "invalid_catch_up"),
                             ({"target": {"workflow_id": wf["id"], "input": {}}},
                              "input_invalid")):
            bad = await client.post("/v1/schedules", headers=admin, json={**body, **change})
            assert bad.status_code == 422, bad.text
            assert bad.headers["content-type"].startswith("application/problem+json")
            assert bad.json()["code"] == code
        for role in ("member", "viewer"):
            refused = await client.post("/v1/schedules", headers=auth(mine[role]), json=body)
            assert refused.status_code == 403
        stranger = await client.post("/v1/schedules", headers=auth(theirs["admin"]), json=body)
        assert stranger.status_code == 404  # not their workflow
        made = await client.post("/v1/schedules", headers=admin, json=body)
        assert made.status_code == 201, made.text
        sid = made.json()["id"]
        assert made.json()["status"] == "active" and made.json()["next_tick"]
        again = await client.post("/v1/schedules", headers=admin, json=body)
        assert again.status_code == 409 and again.json()["code"] == "schedule_exists"
        for n in range(3):
            await client.post("/v1/schedules", headers=admin,
                              json={**body, "name": f"more-{n}"})
        names, cursor = [], None
        while True:
            page = (await client.get("/v1/schedules", headers=auth(mine["viewer"]),
                                     params={"limit": 2, **({"cursor": cursor} if cursor
                                                            else {})})).json()
            names += [s["name"] for s in page["data"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert names == ["every-night", "more-0", "more-1", "more-2"]
        for path in (f"/v1/schedules/{sid}", f"/v1/schedules/{uuid.uuid4()}"):
            gone = await client.get(path, headers=auth(theirs["admin"]))
            assert gone.status_code == 404 and gone.json()["code"] == "not_found"
        paused = await client.post(f"/v1/schedules/{sid}/pause", headers=auth(mine["member"]))
        assert paused.status_code == 200 and paused.json()["status"] == "paused"
        assert (await client.post(f"/v1/schedules/{sid}/resume",
                                  headers=auth(mine["member"]))).status_code == 403
        resumed = await client.post(f"/v1/schedules/{sid}/resume", headers=admin)
        assert resumed.json()["status"] == "active"
        assert (await client.delete(f"/v1/schedules/{sid}",
                                    headers=auth(theirs["admin"]))).status_code == 404
        assert (await client.delete(f"/v1/schedules/{sid}", headers=admin)).status_code == 204
        assert (await client.get(f"/v1/schedules/{sid}", headers=admin)).status_code == 404
