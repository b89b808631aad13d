"""Fault 6: a clock jump on one replica. Replica A's wall clock (rig.WallClock: an LD_PRELOAD
library offsetting CLOCK_REALTIME, gettimeofday and time in that process alone) jumps 10
minutes forward, then 15 back, then 5 forward again, each while conversations are running
on both replicas, A's among them. Leases (Redis' own expiry), heartbeats and the reaper's
cutoff (PostgreSQL's `now()`) and the fence (monotonic time) read no replica's wall clock,
so a jump must not cost a turn: besides the usual invariants, every turn ends `done`.

Checked that the jump is real: A's HTTP `date` header (uvicorn reads the wall clock) is off
by the offset set, B's is not."""

from __future__ import annotations

import asyncio
import time
from email.utils import parsedate_to_datetime

import pytest

from tests.e2e.client import Client
from tests.faults.rig import Load, Rig, WallClock, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

JUMPS = (600.0, -900.0, 300.0)  # seconds, one after another: +10 min, -5 min, 0
PER_JUMP = 6  # conversations posted around each jump, half of them on A
MODEL_DELAY = 1.0  # each of a turn's two model calls: turns are in flight at the jump


async def test_clock_jump_on_one_replica(rig: Rig) -> None:
    clock = WallClock(rig.root)
    a, b = rig.replica("a", env=clock.env()), rig.replica("b")
    on_a, on_b = rig.client(a), rig.client(b)
    await rig.budget(on_b)
    load = Load(rig, delay=MODEL_DELAY)
    conn = await rig.pg.connect()
    in_flight: list[int] = []
    try:
        for jump in JUMPS:
            threads = [await load.thread(on_b) for _ in range(PER_JUMP)]
            posts = [asyncio.create_task(load.post([on_a if n % 2 == 0 else on_b], t))
                     for n, t in enumerate(threads)]

            async def a_runs() -> bool:
                return bool(await conn.fetchval(
                    "SELECT count(*) FROM turns WHERE status = 'running' AND owner = $1",
                    a.owner))

            await wait_for("a turn running on A", a_runs, 60, every=0.05)
            at = await conn.fetchval("SELECT now()")
            clock.jump(jump)
            await wait_for(f"A's clock {clock.offset:+g}s off",
                           lambda: _skewed(on_a, clock.offset), 30)
            assert abs(await _skew(on_b)) < 5, "B's clock moved too: the fault leaked"
            await asyncio.gather(*posts)
            in_flight.append(await conn.fetchval(
                "SELECT count(*) FROM turns WHERE started_at <= $1 "
                "AND (ended_at IS NULL OR ended_at >= $1)", at))
        clock.jump(-clock.offset)
    finally:
        await conn.close()
    figures = await rig.check(load)
    assert load.unaccepted == 0
    assert figures.statuses == {"done": figures.turns}, (
        f"a clock jump cost turns: {dict(figures.statuses)}")
    print(f"\nFAULT clock-jump: A's wall clock jumped {'/'.join(f'{j:+g}s' for j in JUMPS)} "
          f"with turns in flight at each jump ({'/'.join(map(str, in_flight))}, on both "
          f"replicas, posted half to A); checked A's date header moved and B's did not, "
          f"every turn done, one turn per message, ledger, tool runs; {figures.line()}")


async def _skew(client: Client) -> float:
    """How far the replica's wall clock is from this process's, by its `date` header."""
    response = await client.request("GET", "/readyz")
    return parsedate_to_datetime(response.headers["date"]).timestamp() - time.time()


async def _skewed(client: Client, offset: float) -> bool:
    return abs(await _skew(client) - offset) < 3
