"""10,000 no-op jobs on two worker processes: ator's queue beside procrastinate (bench).

```sh
ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/jobs.py
```

Each system gets a fresh database on the same server (`bench_jobs_ator`,
`bench_jobs_procrastinate`). The parent enqueues `--jobs` no-op jobs (one statement for ator,
`batch_defer_async` for procrastinate), starts two worker processes and waits until they are
connected and idle, lets the server's statistics settle, then tells both workers to go and
times until every job is finished (polled every 50 ms on one connection, whose commits are
subtracted). Counted per job:
- statements (client): ator from `Database.stats`; procrastinate by counting its
  connector's `execute_query*` calls (one statement each);
- commits (server): `pg_stat_database.xact_commit` of the system's database over the
  window (worker processes exit before it is read, which publishes their statistics).
Flags: --jobs (10000), --concurrency (50 handlers per worker, both systems), --batch (ator's
claim size, 50), --only ator|procrastinate. Results also go to bench/results/jobs.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

from pgserver import STATS_SETTLE_SECONDS, PgServer  # noqa: E402

# --- the workers (child processes) -------------------------------------------------------

async def ator_child(url: str, owner: str, concurrency: int, batch: int) -> None:
    from ator.jobs import JobKind, JobKinds, Worker
    from ator.settings import Settings
    from ator.store.database import open_database

    async def noop(ctx: Any, payload: dict[str, Any]) -> None:
        return None

    db = await open_database(Settings(database_url=url, db_pool_size=20), run_migrations=False)
    worker = Worker(db, JobKinds([JobKind("noop", noop)]), owner=owner,
                    concurrency=concurrency, batch=batch, lease_ttl=30, poll_interval=1.0,
                    prune_interval=3600)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    before = db.stats.snapshot()
    await worker.start()
    await stop.wait()
    await worker.close(grace=5)
    statements, commits = (a - b for a, b in zip(db.stats.snapshot(), before, strict=True))
    print(json.dumps({"statements": statements, "commits": commits,
                      "completed": worker.stats.completed, "claims": worker.stats.claims}),
          flush=True)
    await db.close()


def procrastinate_app(url: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=url, min_size=1, max_size=20))

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app


async def procrastinate_child(url: str, concurrency: int) -> None:
    app = procrastinate_app(url)
    counted = {"statements": 0}
    connector = app.connector
    for name in ("execute_query_async", "execute_query_one_async", "execute_query_all_async"):
        original = getattr(connector, name)

        def counting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            counted["statements"] += 1
            return _original(*args, **kwargs)

        setattr(connector, name, counting)
    async with app.open_async():
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        counted["statements"] = 0
        # wait=False: the worker stops once it finds the queue empty.
        await app.run_worker_async(concurrency=concurrency, wait=False,
                                   install_signal_handlers=False, delete_jobs="never")
    print(json.dumps(counted), flush=True)


# --- the parent ------------------------------------------------------------------------

async def spawn(*args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__)), "--child", *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, env=os.environ.copy())
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line.strip() == b"READY", line
    return proc


async def measure(server: PgServer, system: str, jobs: int, concurrency: int,
                  batch: int) -> dict[str, Any]:
    import asyncpg

    database = f"bench_jobs_{system}"
    url = await server.recreate(database)
    if system == "ator":
        from ator.jobs import JobKind, JobKinds, JobQueue
        from ator.settings import Settings
        from ator.store.database import open_database
        from ator.store.scope import Scope

        async def unused(ctx: Any, payload: dict[str, Any]) -> None:
            return None

        db = await open_database(Settings(database_url=url))
        queue = JobQueue(db, JobKinds([JobKind("noop", unused)]))
        import uuid
        await queue.enqueue_many(Scope(uuid.uuid4()), "noop", [{}] * jobs)
        await db.close()
        done_sql = "SELECT count(*) FROM jobs WHERE state = 'done'"
        children = [await spawn("ator", url, f"bench-{i}", str(concurrency), str(batch))
                    for i in range(2)]
    else:
        app = procrastinate_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            await app.tasks["noop"].batch_defer_async(*[{}] * jobs)
        done_sql = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
        children = [await spawn("procrastinate", url, str(concurrency)) for _ in range(2)]

    await server.settle(STATS_SETTLE_SECONDS)
    before = await server.counters(database)
    poll = await asyncpg.connect(url)
    polls = 0
    started = time.perf_counter()
    for child in children:
        assert child.stdin is not None
        child.stdin.write(b"GO\n")
        await child.stdin.drain()
    while True:
        polls += 1
        if await poll.fetchval(done_sql) >= jobs:
            break
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - started
    await poll.close()
    reports = []
    for child in children:
        if system == "ator":
            child.send_signal(signal.SIGTERM)
        assert child.stdout is not None
        reports.append(json.loads(await asyncio.wait_for(child.stdout.readline(), 60)))
        await child.wait()
    await asyncio.sleep(1.0)  # exited backends publish their statistics as they go
    after = await server.counters(database)
    delta = after - before
    statements = sum(r["statements"] for r in reports)
    await server.drop(database)
    return {"system": system, "jobs": jobs, "seconds": round(elapsed, 3),
            "jobs_per_s": round(jobs / elapsed), "statements_per_job": round(statements / jobs, 3),
            "commits_per_job": round((delta.commits - polls) / jobs, 3),
            "other_dbs_commits": delta.other_commits}


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--only", choices=["ator", "procrastinate"])
    args = parser.parse_args()
    server = await PgServer.start()
    try:
        print(f"server: {server.description}; load average {os.getloadavg()}")
        results = [await measure(server, system, args.jobs, args.concurrency, args.batch)
                   for system in ("ator", "procrastinate") if args.only in (None, system)]
    finally:
        await server.close()
    print(f"{'system':<14}{'jobs/s':>9}{'seconds':>9}{'stmts/job':>11}{'commits/job':>13}")
    for r in results:
        print(f"{r['system']:<14}{r['jobs_per_s']:>9}{r['seconds']:>9}"
              f"{r['statements_per_job']:>11}{r['commits_per_job']:>13}")
    out = HERE / "results" / "jobs.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"load_average": os.getloadavg(), "results": results}, indent=2))
    ator = next((r for r in results if r["system"] == "ator"), None)
    other = next((r for r in results if r["system"] == "procrastinate"), None)
    missed = ator is not None and (ator["jobs_per_s"] < 2000 or (
        other is not None and ator["jobs_per_s"] <= other["jobs_per_s"]))
    return 1 if missed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        kind, *rest = sys.argv[2:]
        if kind == "ator":
            asyncio.run(ator_child(rest[0], rest[1], int(rest[2]), int(rest[3])))
        else:
            asyncio.run(procrastinate_child(rest[0], int(rest[1])))
    else:
        sys.exit(asyncio.run(main()))
