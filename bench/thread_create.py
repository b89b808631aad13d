"""Making a thread: `store.threads.create_thread` (one prebuilt text statement) against the
same INSERT … SELECT built with SQLAlchemy Core on every call (the form it had before), in
alternating rounds of one process, on one database.

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/thread_create.py [--calls 2000] [--rounds 3]

Prints CPU and wall milliseconds per call for each form and the Core/text ratio. Both forms
go through `Database` (the Core one through its compile cache, as it did in production).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import asyncpg
import sqlalchemy as sa

from ator.settings import Settings
from ator.store import orgs, setups
from ator.store import threads as thread_store
from ator.store.database import Database, open_database
from ator.store.schema import setups as setups_table
from ator.store.schema import threads as threads_table
from ator.store.scope import Scope

DB_NAME = "bench_thread_create"


async def core_create(db: Database, scope: Scope, setup_id: uuid.UUID, title: str) -> Any:
    """The Core statement create_thread built per call before it became text."""
    thread_id = uuid.uuid4()
    source = sa.select(
        sa.literal(thread_id, sa.Uuid).label("id"),
        setups_table.c.org_id,
        setups_table.c.id.label("setup_id"),
        sa.literal(scope.user_id, sa.Uuid).label("created_by"),
        sa.literal(title).label("title"),
        sa.literal("").label("instructions"),
        sa.literal(None, sa.Uuid).label("parent_id"),
        sa.literal(thread_id, sa.Uuid).label("root_id"),
        sa.literal(0).label("depth"),
        sa.cast(sa.literal({}, sa.JSON), sa.dialects.postgresql.JSONB).label("metadata"),
    ).where(setups_table.c.id == setup_id, setups_table.c.org_id == scope.org_id,
            setups_table.c.archived_at.is_(None))
    stmt = threads_table.insert().from_select(
        ["id", "org_id", "setup_id", "created_by", "title", "instructions", "parent_id",
         "root_id", "depth", "metadata"], source).returning(threads_table)
    return (await db.write(stmt))[0]


async def text_create(db: Database, scope: Scope, setup_id: uuid.UUID, title: str) -> Any:
    return await thread_store.create_thread(db, scope, setup_id, title=title)


async def timed(form: Any, db: Database, scope: Scope, setup_id: uuid.UUID,
                calls: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(calls):
        await form(db, scope, setup_id, "t")
    return ((time.process_time() - cpu) / calls * 1e3,
            (time.perf_counter() - wall) / calls * 1e3)


async def main(calls: int, rounds: int) -> None:
    base = os.environ["ATOR_DATABASE_URL"]
    admin = await asyncpg.connect(base)
    await admin.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {DB_NAME}")
    url = base.rsplit("/", 1)[0] + f"/{DB_NAME}"
    db = await open_database(Settings(database_url=url))
    try:
        scope = Scope((await orgs.create_org(db, "bench")).id)
        setup = await setups.create_setup(db, scope, name="s", provider="scripted", model="m")
        forms = {"core": core_create, "text": text_create}
        for form in forms.values():  # warm: compile caches, prepared statements
            await timed(form, db, scope, setup.id, 200)
        cpu: dict[str, list[float]] = {name: [] for name in forms}
        for r in range(rounds):
            for name, form in forms.items():
                c, w = await timed(form, db, scope, setup.id, calls)
                cpu[name].append(c)
                print(f"round {r + 1} {name:4}: {c:.3f} ms CPU, {w:.3f} ms wall per call")
        core, text = sorted(cpu["core"])[rounds // 2], sorted(cpu["text"])[rounds // 2]
        print(f"median CPU per call: core {core:.3f} ms, text {text:.3f} ms, "
              f"ratio {core / text:.2f}")
    finally:
        await db.close()
        await admin.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.rounds))
