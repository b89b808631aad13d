"""Faults 2 and 3: the rig's own PostgreSQL restarted mid-load; its own Redis restarted, then
unreachable for 30 s. Load runs before, during and after each outage (a post refused while a
dependency is down is repeated on the other replica, and a post that no replica accepts is
counted, not asserted: it was never accepted). Afterwards the invariants hold."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.faults.rig import Load, Rig, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

OUTAGE = float(os.environ.get("ATOR_FAULT_REDIS_OUTAGE", "30"))


async def _ready(rig: Rig) -> bool:
    for client in rig.clients[-2:]:
        if (await client.request("GET", "/readyz")).status_code != 200:
            return False
    return True


async def _wave(rig: Rig, load: Load, count: int) -> list[asyncio.Task[None]]:
    clients = rig.clients[-2:]
    threads = [await load.thread(clients[n % 2]) for n in range(count)]
    return [asyncio.create_task(load.post(clients, t)) for t in threads]


async def test_postgres_restarted_mid_load(rig: Rig) -> None:
    a, b = rig.replica("a"), rig.replica("b")
    rig.client(a), rig.client(b)
    await rig.budget(rig.clients[0])
    load = Load(rig, delay=0.5)
    posts = await _wave(rig, load, 8)
    conn = await rig.pg.connect()
    try:  # the fault lands while turns run
        await wait_for("a turn running", lambda: conn.fetchval(
            "SELECT count(*) FROM turns WHERE status = 'running'"), 30, every=0.05)
        running = await conn.fetchval("SELECT count(*) FROM turns WHERE status = 'running'")
    finally:
        await conn.close()
    await asyncio.to_thread(rig.pg.stop)
    await asyncio.gather(*posts)
    await asyncio.to_thread(rig.pg.start)
    await wait_for("both replicas ready again", lambda: _ready(rig), 60)
    await asyncio.gather(*await _wave(rig, load, 6))  # after: the service works again
    figures = await rig.check(load)
    assert all(r.proc.poll() is None for r in (a, b)), "a replica died of the restart"
    print(f"\nFAULT postgres-restart: in flight={running} running turns (8 conversations with "
          f"a tool call each, 6 more after); checked one turn per message, typed ends, "
          f"ledger, tool runs; unaccepted={load.unaccepted} {figures.line()}")


async def test_redis_restarted_and_unreachable(rig: Rig) -> None:
    a, b = rig.replica("a"), rig.replica("b")
    clients = [rig.client(a), rig.client(b)]
    await rig.budget(clients[0])
    load = Load(rig, delay=0.5)
    # Threads made up front: making a setup needs the coordinator, refused (503) while
    # Redis is away; posting to a thread is what the faults are about.
    threads = [await load.thread(clients[n % 2]) for n in range(20)]

    def wave(part: list[str]) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(load.post(clients, t)) for t in part]

    posts = wave(threads[:6])
    conn = await rig.pg.connect()
    try:
        await wait_for("a turn running", lambda: conn.fetchval(
            "SELECT count(*) FROM turns WHERE status = 'running'"), 30, every=0.05)
    finally:
        await conn.close()
    rig.redis.stop()  # restarted: every key (leases, queues) is gone
    await asyncio.to_thread(rig.redis.start)
    await asyncio.gather(*posts)
    posts = wave(threads[6:12])
    rig.redis.stop()  # unreachable for OUTAGE seconds, load in flight
    await asyncio.gather(*posts, *wave(threads[12:16]))
    # The outage's length is the fault itself, not a synchronization.
    await asyncio.sleep(OUTAGE)
    await asyncio.to_thread(rig.redis.start)
    await wait_for("both replicas ready again", lambda: _ready(rig), 60)
    await asyncio.gather(*wave(threads[16:]))
    figures = await rig.check(load)
    assert all(r.proc.poll() is None for r in (a, b)), "a replica died of the outage"
    print(f"\nFAULT redis-restart+{OUTAGE:g}s-outage: in flight=6 conversations at the restart, "
          f"6 at the outage's start, 4 posted during it, 4 after; checked one turn per "
          f"message, typed ends, ledger, tool runs; unaccepted={load.unaccepted} "
          f"{figures.line()}")
