"""A job worker process for the two-process job tests (tests/test_jobs_processes.py).

argv: database_url owner lease_ttl concurrency batch. Runs ator's JobRunner (the one `ator
worker` runs) with the test kinds below; prints "READY" once it is claiming; SIGTERM stops it
gracefully (exit 0); the tests SIGKILL it too.

Kinds (their tables are created by the test):
- `effect`: writes a row and completes the job in the same transaction (exactly-once);
- `touch`: writes a row in its own statement, completion follows (at-least-once);
- `fair`: records when it started (a sequence gives the global order), then works `ms`.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

import sqlalchemy as sa

from ator.jobs import JobContext, JobKind, JobKinds, JobRunner
from ator.settings import Settings
from ator.store.database import open_database

_EFFECT = sa.text("INSERT INTO job_effects (job_id, owner) VALUES (:id, :owner)")
_TOUCH = sa.text("INSERT INTO job_touches (job_id, owner) VALUES (:id, :owner)")
_START = sa.text("INSERT INTO job_starts (job_id, org_id) VALUES (:id, :org)")


async def effect(ctx: JobContext, payload: dict[str, Any]) -> None:
    async with ctx.db.begin() as conn:
        await conn.execute(_EFFECT, {"id": ctx.id, "owner": ctx.owner})
        await ctx.complete(conn)


async def touch(ctx: JobContext, payload: dict[str, Any]) -> None:
    await ctx.db.write(_TOUCH, {"id": ctx.id, "owner": ctx.owner})


async def fair(ctx: JobContext, payload: dict[str, Any]) -> None:
    await ctx.db.write(_START, {"id": ctx.id, "org": ctx.scope.org_id})
    await asyncio.sleep(payload.get("ms", 0) / 1000)  # the job's "work"


KINDS = [JobKind("effect", effect, max_attempts=20), JobKind("touch", touch, max_attempts=20),
         JobKind("fair", fair, max_attempts=20)]


async def main() -> None:
    url, owner, ttl, concurrency, batch = sys.argv[1:6]
    settings = Settings(database_url=url, job_lease_ttl=float(ttl),
                        job_concurrency=int(concurrency), job_batch=int(batch),
                        job_poll_interval=0.2, job_grace=5.0, db_pool_size=8)
    db = await open_database(settings, run_migrations=False)
    runner = JobRunner(db, JobKinds(KINDS), settings, owner=owner)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await runner.start()
    print("READY", flush=True)
    await stop.wait()
    await runner.close()
    await db.close()


if __name__ == "__main__":
    asyncio.run(main())
