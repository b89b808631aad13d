"""The job queue and worker in one process on real PostgreSQL: in-transaction enqueue and
its NOTIFY, unique keys, retries (backoff, retry_after, timeout), dead and replay, per-org
limits across two workers, heartbeats, hand-back on close, pruning, org isolation."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ator.errors import ConfigError, Conflict, NotFound
from ator.jobs import JobContext, JobKind, JobKinds, JobQueue, Retry, Worker
from ator.store.database import Database, open_database
from ator.store.scope import Scope


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


@pytest.fixture
async def db(settings_factory: Any) -> AsyncIterator[Database]:
    database = await open_database(settings_factory())
    await database.pool.execute("DELETE FROM jobs")
    yield database
    await database.close()


@pytest.fixture
async def workers(db: Database) -> AsyncIterator[Callable[..., Awaitable[Worker]]]:
    started: list[Worker] = []

    async def start(kinds: JobKinds, **options: Any) -> Worker:
        options.setdefault("poll_interval", 0.05)
        worker = Worker(db, kinds, owner=f"w-{uuid.uuid4().hex[:6]}", **options)
        await worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        await worker.close(grace=0.5)


def org() -> Scope:
    return Scope(uuid.uuid4())


async def state(queue: JobQueue, scope: Scope, job_id: int) -> str:
    return (await queue.get(scope, job_id)).state


async def test_a_job_enqueued_in_a_transaction_exists_only_if_it_commits_and_wakes_workers(
    db: Database, workers: Any
) -> None:
    ran: list[int] = []

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        ran.append(payload["n"])

    kinds = JobKinds([JobKind("outbox", handler)])
    queue = JobQueue(db, kinds)
    scope = org()
    # A long poll interval: only the NOTIFY sent at commit can wake the worker in time.
    await workers(kinds, poll_interval=60.0)
    with pytest.raises(RuntimeError):
        async with db.begin() as conn:
            await queue.enqueue(scope, "outbox", {"n": 1}, within=conn)
            raise RuntimeError("the caller's transaction fails")
    async with db.begin() as conn:
        job_id = await queue.enqueue(scope, "outbox", {"n": 2}, within=conn,
                                     request_id="req-7")
    assert job_id is not None
    await wait_until(lambda: _is(queue, scope, job_id, "done"), timeout=5)
    assert ran == [2]
    assert (await queue.get(scope, job_id)).request_id == "req-7"
    assert await queue.counts(scope) == {"done": 1}


async def _is(queue: JobQueue, scope: Scope, job_id: int, wanted: str) -> bool:
    return await state(queue, scope, job_id) == wanted


async def test_a_unique_key_is_unique_while_queued_or_running_only(db: Database,
                                                                   workers: Any) -> None:
    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    kinds = JobKinds([JobKind("sync", handler)])
    queue = JobQueue(db, kinds)
    a, b = org(), org()
    first = await queue.enqueue(a, "sync", unique_key="k")
    assert first is not None
    assert await queue.enqueue(a, "sync", unique_key="k") is None
    assert await queue.enqueue(b, "sync", unique_key="k") is not None  # per org
    await workers(kinds)
    await wait_until(lambda: _is(queue, a, first, "done"))
    assert await queue.enqueue(a, "sync", unique_key="k") is not None  # free again
    with pytest.raises(ConfigError):
        await queue.enqueue(a, "nobody-registered-this")


async def test_a_failing_job_goes_dead_with_its_last_error_and_a_replay_runs_it(
    db: Database, workers: Any
) -> None:
    attempts: list[int] = []
    fixed = asyncio.Event()

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        attempts.append(ctx.attempt)
        if not fixed.is_set():
            raise RuntimeError(f"boom {ctx.attempt}")

    kinds = JobKinds([JobKind("flaky", handler, max_attempts=3, backoff_base=0.01)])
    queue = JobQueue(db, kinds)
    scope = org()
    job_id = await queue.enqueue(scope, "flaky")
    assert job_id is not None
    await workers(kinds)
    await wait_until(lambda: _is(queue, scope, job_id, "dead"))
    dead = await queue.get(scope, job_id)
    assert (dead.attempt, dead.last_error) == (3, "RuntimeError: boom 3")
    assert attempts == [1, 2, 3]
    with pytest.raises(NotFound):
        await queue.replay(org(), job_id)  # another org's job
    fixed.set()
    await queue.replay(scope, job_id)
    await wait_until(lambda: _is(queue, scope, job_id, "done"))
    assert attempts == [1, 2, 3, 1]
    with pytest.raises(Conflict):
        await queue.replay(scope, job_id)  # only a dead job


async def test_retry_after_and_timeouts_are_attempts_rescheduled(db: Database,
                                                                 workers: Any) -> None:
    async def asks(ctx: JobContext, payload: dict[str, Any]) -> None:
        raise Retry(after=30, reason="upstream said 429")

    async def hangs(ctx: JobContext, payload: dict[str, Any]) -> None:
        await asyncio.Event().wait()

    kinds = JobKinds([JobKind("asks", asks), JobKind("hangs", hangs, timeout=0.1,
                                                     backoff_base=20)])
    queue = JobQueue(db, kinds)
    scope = org()
    asked = await queue.enqueue(scope, "asks")
    hung = await queue.enqueue(scope, "hangs")
    assert asked is not None and hung is not None
    await workers(kinds)

    async def both_retried() -> bool:
        rows = [await queue.get(scope, i) for i in (asked, hung)]
        return all(r.state == "queued" and r.attempt == 1 for r in rows)

    await wait_until(both_retried)
    now = await db.pool.fetchval("SELECT now()")
    asked_row, hung_row = await queue.get(scope, asked), await queue.get(scope, hung)
    assert asked_row.last_error == "retry requested: upstream said 429"
    assert 29 < (asked_row.run_at - now).total_seconds() <= 30
    assert hung_row.last_error == "timed out after 0.1s"
    assert 9 < (hung_row.run_at - now).total_seconds() <= 20  # base 20 s, equal jitter


def test_backoff_grows_exponentially_with_jitter_under_its_cap() -> None:
    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    kind = JobKind("k", handler, backoff_base=1.0, backoff_cap=10.0)
    for attempt, full in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 10.0)):
        delays = [kind.backoff(attempt) for _ in range(200)]
        assert all(full / 2 <= d <= full for d in delays)
        assert max(delays) - min(delays) > full / 4  # jittered, not one value


async def test_a_per_org_limit_holds_across_two_workers(db: Database, workers: Any) -> None:
    running: dict[uuid.UUID, int] = {}
    peak: dict[uuid.UUID, int] = {}
    done = 0

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        nonlocal done
        org_id = ctx.scope.org_id
        running[org_id] = running.get(org_id, 0) + 1
        peak[org_id] = max(peak.get(org_id, 0), running[org_id])
        await asyncio.sleep(0.02)  # the job's work, long enough to overlap
        running[org_id] -= 1
        done += 1

    kinds = JobKinds([JobKind("limited", handler, per_org_limit=2)])
    queue = JobQueue(db, kinds)
    a, b = org(), org()
    await queue.enqueue_many(a, "limited", [{}] * 20)
    await queue.enqueue_many(b, "limited", [{}] * 20)
    await workers(kinds, concurrency=10)
    await workers(kinds, concurrency=10)

    async def finished() -> bool:
        return done == 40

    await wait_until(finished)
    assert peak == {a.org_id: 2, b.org_id: 2}


async def test_heartbeats_keep_a_long_job_and_close_hands_back_a_held_one(
    db: Database, workers: Any
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()
    runs = 0

    async def long(ctx: JobContext, payload: dict[str, Any]) -> None:
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()

    kinds = JobKinds([JobKind("long", long)])
    queue = JobQueue(db, kinds)
    scope = org()
    job_id = await queue.enqueue(scope, "long")
    assert job_id is not None
    first = await workers(kinds, lease_ttl=0.6)
    await asyncio.wait_for(started.wait(), 5)
    await workers(kinds, lease_ttl=0.6)  # would rescue the job if its lease lapsed
    await asyncio.sleep(2.0)  # three lease lengths pass while it runs
    assert runs == 1 and await state(queue, scope, job_id) == "running"
    await first.close(grace=0.05)
    row = await queue.get(scope, job_id)
    assert first.stats.released == 1
    assert row.attempt in (0, 1)  # handed back unspent (0), or already re-claimed (1)
    release.set()
    await wait_until(lambda: _is(queue, scope, job_id, "done"))
    assert runs == 2


async def test_finished_jobs_are_pruned_by_age(db: Database, workers: Any) -> None:
    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    kinds = JobKinds([JobKind("brief", handler)])
    queue = JobQueue(db, kinds)
    scope = org()
    job_id = await queue.enqueue(scope, "brief")
    assert job_id is not None
    await workers(kinds)
    await wait_until(lambda: _is(queue, scope, job_id, "done"))
    await db.pool.execute("UPDATE jobs SET finished_at = now() - interval '2 hours' "
                          "WHERE id = $1", job_id)
    await workers(kinds, keep_done=3600, prune_interval=0.05)

    async def gone() -> bool:
        return await db.pool.fetchval("SELECT count(*) FROM jobs WHERE id = $1", job_id) == 0

    await wait_until(gone)


async def test_a_job_completed_in_its_handlers_transaction_commits_with_its_effect(
    db: Database, workers: Any
) -> None:
    await db.pool.execute("CREATE TABLE IF NOT EXISTS job_effect_probe (job_id bigint)")
    insert = sa.text("INSERT INTO job_effect_probe (job_id) VALUES (:id)")

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        async with ctx.db.begin() as conn:
            await conn.execute(insert, {"id": ctx.id})
            await ctx.complete(conn)

    kinds = JobKinds([JobKind("atomic", handler)])
    queue = JobQueue(db, kinds)
    scope = org()
    job_id = await queue.enqueue(scope, "atomic")
    assert job_id is not None
    worker = await workers(kinds)
    try:
        await wait_until(lambda: _is(queue, scope, job_id, "done"))
        assert await db.pool.fetchval(
            "SELECT count(*) FROM job_effect_probe WHERE job_id = $1", job_id) == 1
    finally:
        await worker.close()
        await db.pool.execute("DROP TABLE job_effect_probe")  # the schema test sees all
    assert worker.stats.completed == 1


def test_the_jobs_package_exports_are_pinned() -> None:
    import ator.jobs

    assert sorted(ator.jobs.__all__) == [
        "BudgetRefused", "Clock", "Handler", "JobContext", "JobKind", "JobKinds", "JobQueue",
        "JobRunner", "LeaseLost", "ManualClock", "ModelWork", "Retry", "Scheduler", "Schedules",
        "SystemClock", "WorkCall", "WorkResult", "Worker", "WorkerStats"]
    for name in ator.jobs.__all__:
        assert hasattr(ator.jobs, name)


@pytest.mark.parametrize("run_jobs", [True, False])
async def test_a_served_process_runs_jobs_unless_told_not_to(settings_factory: Any,
                                                             run_jobs: bool) -> None:
    from ator.api.app import create_app

    app = create_app(settings_factory(run_jobs=run_jobs))
    async with app.router.lifespan_context(app):
        runtime = app.state.ator
        assert runtime.engine.job_runner.running is run_jobs
    assert runtime.engine.job_runner.running is False


async def test_a_kind_registered_on_the_runtime_runs_through_its_queue(make_ator: Any) -> None:
    ran = asyncio.Event()

    async def handler(ctx: JobContext, payload: dict[str, Any]) -> None:
        assert payload == {"hello": "jobs"}
        ran.set()

    async with make_ator(job_poll_interval=0.05) as runtime:
        runtime.service(JobKinds).register(JobKind("greet", handler))
        with pytest.raises(ConfigError):
            runtime.service(JobKinds).register(JobKind("greet", handler))  # no silent overwrite
        await runtime.start_jobs()
        org_row = await runtime.create_org(f"jobs-{uuid.uuid4().hex[:6]}")
        await runtime.service(JobQueue).enqueue(Scope(org_row.id), "greet", {"hello": "jobs"})
        await asyncio.wait_for(ran.wait(), 10)


async def _claim_cost(db: Database, kinds: list[str]) -> tuple[int, list[Any]]:
    """The claim statement's buffer reads under EXPLAIN ANALYZE, and what it claimed (rolled
    back: EXPLAIN ANALYZE runs it)."""
    from ator.store import jobs as job_store

    sql, args = db.compile(job_store._CLAIM, {
        "owner": "probe", "kinds": kinds, "limits": [None] * len(kinds), "batch": 10,
        "ttl": 30.0, "cursor": None})
    async with db.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            probe = conn.transaction()  # a savepoint: EXPLAIN ANALYZE claims too
            await probe.start()
            plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args)
            await probe.rollback()
            claimed = await conn.fetch(sql, *args)
        finally:
            await tx.rollback()
    import json
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"]), list(claimed)


async def test_a_claim_reads_nothing_of_a_backlog_it_cannot_take(db: Database) -> None:
    # A foreign org's 40,000 queued jobs of kinds no worker here serves, sorting between
    # the served kinds (what the jobs-fairness test once left behind: every claim read
    # them, and workflow runs behind them timed out).
    ours, theirs = org(), org()
    served = ["a.served", "m.served", "z.served"]
    queue = JobQueue(db, JobKinds([JobKind(k, _noop) for k in served]))
    job_id = await queue.enqueue(ours, "m.served")
    before, claimed = await _claim_cost(db, served)
    assert [r["id"] for r in claimed] == [job_id]
    for kind in ("f.unserved", "t.unserved"):
        await db.pool.execute(
            "INSERT INTO jobs (org_id, kind, payload, max_attempts)"
            " SELECT $1, $2, '{}', 1 FROM generate_series(1, 20000)", theirs.org_id, kind)
    await db.pool.execute("ANALYZE jobs")
    after, claimed = await _claim_cost(db, served)
    assert [r["id"] for r in claimed] == [job_id]  # still ours, at once
    # The claim's cost does not grow with the backlog (a scan of it reads hundreds of pages).
    assert after <= before + 10, (before, after)
    # Fairness between orgs is kept: another org's backlog of the served kind takes a share,
    # not the batch, and what a claim reads does not grow with that backlog either.
    costs = []
    for n in (2_000, 18_000):
        await db.pool.execute(
            "INSERT INTO jobs (org_id, kind, payload, max_attempts)"
            " SELECT $1, 'm.served', '{}', 1 FROM generate_series(1, $2)", theirs.org_id, n)
        await db.pool.execute("ANALYZE jobs")
        cost, claimed = await _claim_cost(db, served)
        assert job_id in [r["id"] for r in claimed]
        assert {r["org_id"] for r in claimed} == {ours.org_id, theirs.org_id}
        costs.append(cost)
    assert costs[1] <= costs[0] + 10, costs
    await db.pool.execute("DELETE FROM jobs")


async def _noop(ctx: JobContext, payload: dict[str, Any]) -> None:
    return None


async def test_orgs_whose_jobs_all_wait_or_are_at_their_limit_do_not_starve_a_ready_one(
    db: Database,
) -> None:
    # More orgs than a claim's batch whose queued jobs are all due later (a backoff, a
    # `wait` step), and as many at their per-org limit, sort ahead of an org with a ready
    # job: every claim took its batch of pairs from them, claimed nothing, kept its cursor,
    # and the ready job never ran (the end of the suite: workflow runs stayed `running`).
    from ator.store import jobs as job_store

    kinds = JobKinds([JobKind("free", _noop), JobKind("limited", _noop, per_org_limit=1)])
    queue = JobQueue(db, kinds)
    low = "00000000-0000-0000-0000-"
    for n in range(12):
        waiting = Scope(uuid.UUID(f"{low}{n:012d}"))
        later = datetime.now(UTC) + timedelta(hours=1)
        await queue.enqueue(waiting, "free", run_at=later)
        await queue.enqueue(waiting, "limited", run_at=later)
        full = Scope(uuid.UUID(f"{low}{100 + n:012d}"))
        await queue.enqueue(full, "limited")
        await queue.enqueue(full, "limited")
    # The full orgs' first job runs (held by another worker): each is at its limit of 1.
    held = await job_store.claim_serialized(db, owner="other", kinds=["limited"],
                                            limits=[1], batch=100, ttl=60, cursor=None)
    assert len(held) == 12
    ready = Scope(uuid.UUID("ffffffff-0000-0000-0000-000000000000"))
    free_id = await queue.enqueue(ready, "free")
    limited_id = await queue.enqueue(ready, "limited")
    got = await job_store.claim(db, owner="w", kinds=["free"], limits=[None], batch=4,
                                ttl=60, cursor=None)
    assert [j.id for j in got] == [free_id]
    got = await job_store.claim_serialized(db, owner="w", kinds=["limited"], limits=[1],
                                           batch=4, ttl=60, cursor=None)
    assert [j.id for j in got] == [limited_id]
    await db.pool.execute("DELETE FROM jobs")


async def test_a_worker_writes_its_jobs_in_id_order_whatever_order_it_names_them(
    db: Database,
) -> None:
    # A worker's completions, heartbeats and hand-backs go out on separate connections and
    # can meet on the same rows: each must lock them in one order (by id), or two can each
    # hold a row the other waits for. Here the lower job is held by another transaction:
    # a completion that names the higher one first must wait before it locks that one.
    from ator.store import jobs as job_store

    queue = JobQueue(db, JobKinds([JobKind("k", _noop)]))
    # Of two orgs, the later job's first: an index by (kind, org) lists it first.
    scope = Scope(uuid.UUID("ffffffff-0000-0000-0000-000000000000"))
    first = await queue.enqueue(scope, "k")
    second = await queue.enqueue(Scope(uuid.UUID("00000000-0000-0000-0000-000000000001")), "k")
    assert first is not None and second is not None
    # A table of production's size (finished jobs): the ids are then looked up one by one,
    # in the order the statement was given them, unless it sorts them itself.
    await db.pool.execute(
        "INSERT INTO jobs (org_id, kind, state, max_attempts, finished_at)"
        " SELECT $1, 'k', 'done', 1, now() FROM generate_series(1, 20000)", scope.org_id)
    await db.pool.execute("ANALYZE jobs")
    claimed = await job_store.claim(db, owner="w", kinds=["k"], limits=[None], batch=2,
                                    ttl=60, cursor=None)
    attempts = {j.id: j.attempt for j in claimed}
    assert sorted(attempts) == [first, second]
    for write in ("complete_many", "heartbeat", "release"):
        async with db.pool.acquire() as side:
            holding = side.transaction()
            await holding.start()
            await side.execute("SELECT 1 FROM jobs WHERE id = $1 FOR UPDATE", first)
            if write == "heartbeat":
                task = asyncio.create_task(job_store.heartbeat(db, "w", [second, first], 60))
            else:
                task = asyncio.create_task(getattr(job_store, write)(
                    db, "w", [(second, attempts[second]), (first, attempts[first])]))

            async def waits() -> bool:
                return bool(await db.pool.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()"))
            await wait_until(waits)
            # The higher job is not locked yet: this side can take it without waiting.
            assert await side.fetchval(
                "SELECT id FROM jobs WHERE id = $1 FOR UPDATE NOWAIT", second) == second
            await holding.rollback()
        written = await task
        assert (len(written) if not isinstance(written, int) else written) == 2, write
        if write == "release":
            break
        if write == "complete_many":  # claim them again for the next write
            await db.pool.execute(
                "UPDATE jobs SET state = 'running', lease_owner = 'w', finished_at = NULL"
                " WHERE id = ANY($1::bigint[])", [first, second])
