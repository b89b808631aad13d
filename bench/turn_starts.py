"""A burst of messages to idle threads, started one statement each (`store.turns.post_turn`
on the pool, as before `engine.starts`) against the group commit (`engine.starts.StartBatcher`:
the starts that arrive while others are written share one `post_turns` statement), in
alternating rounds of one process, on one database.

    ATOR_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python bench/turn_starts.py [--burst 1000] [--rounds 3]

Each round posts one message to each of `--burst` new threads at once and waits for every
start to commit. Prints, per form: wall ms for the burst, this process's CPU ms per start,
PostgreSQL's CPU ms per start (its server processes, read with psutil), statements per start;
then the medians' ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from typing import Any

import asyncpg
import psutil
import uvloop

from ator.engine.starts import StartBatcher
from ator.settings import Settings
from ator.store import orgs, setups
from ator.store import threads as thread_store
from ator.store import turns as turn_store
from ator.store.database import Database, open_database
from ator.store.mailbox import Post
from ator.store.scope import Scope

DB_NAME = "bench_turn_starts"


def postgres_cpu() -> float:
    total = 0.0
    for p in psutil.process_iter(["name"]):
        if p.info["name"] and p.info["name"].startswith("postgres"):
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
    return total


async def burst(form: str, db: Database, scope: Scope, setup_id: uuid.UUID,
                n: int) -> dict[str, float]:
    threads = [(await thread_store.create_thread(db, scope, setup_id, title="t")).id
               for _ in range(n)]
    batcher = StartBatcher(db, owner="bench")

    async def one(thread_id: uuid.UUID) -> Any:
        post = Post.message(scope, uuid.uuid4().hex, "hello")
        if form == "single":
            return await turn_store.post_turn(db, scope, thread_id, uuid.uuid4(), post,
                                              owner="bench")
        return await batcher.post(turn_store.Starting(scope, thread_id, uuid.uuid4(), post))

    statements, pg = db.stats.statements, postgres_cpu()
    cpu, wall = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(one(t) for t in threads))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pg = postgres_cpu() - pg
    assert all(r[2] is not None for r in results), "a post was not taken"
    return {"wall_ms": wall * 1e3, "cpu_ms": cpu / n * 1e3, "pg_ms": pg / n * 1e3,
            "statements": (db.stats.statements - statements) / n}


async def main(n: int, rounds: int) -> None:
    base = os.environ["ATOR_DATABASE_URL"]
    admin = await asyncpg.connect(base)
    await admin.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {DB_NAME}")
    url = base.rsplit("/", 1)[0] + f"/{DB_NAME}"
    db = await open_database(Settings(database_url=url))
    forms = ("single", "batched")
    try:
        scope = Scope((await orgs.create_org(db, "bench")).id)
        setup = await setups.create_setup(db, scope, name="s", provider="scripted", model="m")
        for form in forms:  # warm: prepared statements, the pool's connections
            await burst(form, db, scope, setup.id, 50)
        seen: dict[str, list[dict[str, float]]] = {f: [] for f in forms}
        for r in range(rounds):
            for form in forms:
                got = await burst(form, db, scope, setup.id, n)
                seen[form].append(got)
                print(f"round {r + 1} {form:7}: burst {got['wall_ms']:7.1f} ms wall, "
                      f"{got['cpu_ms']:.3f} ms CPU here, {got['pg_ms']:.3f} ms PostgreSQL CPU,"
                      f" {got['statements']:.2f} statements per start")
        med = {f: {k: sorted(x[k] for x in seen[f])[rounds // 2] for k in seen[f][0]}
               for f in forms}
        for key in ("wall_ms", "cpu_ms", "pg_ms"):
            print(f"median {key}: single {med['single'][key]:.3f}, batched "
                  f"{med['batched'][key]:.3f}, single/batched "
                  f"{med['single'][key] / med['batched'][key]:.2f}")
    finally:
        await db.close()
        await admin.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    uvloop.run(main(args.burst, args.rounds))
