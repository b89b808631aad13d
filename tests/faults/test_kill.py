"""Fault 1: SIGKILL of a replica at random points, ATOR_FAULT_KILLS times (default 50).

Two replicas take the load; each round posts messages (each turn calls a tool, then
answers), kills one replica at a random offset into the round and starts a new incarnation
on its port. Afterwards: every accepted message produced exactly one turn, every turn ended
typed, nothing is left reserved, no tool ran twice.
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from tests.faults.rig import Load, Rig

pytestmark = [pytest.mark.faults, pytest.mark.timeout(1200)]

KILLS = int(os.environ.get("ATOR_FAULT_KILLS", "50"))
PER_ROUND = 3  # messages posted per round


async def test_sigkill_at_random_points(rig: Rig) -> None:
    rng = random.Random(os.environ.get("ATOR_FAULT_SEED") or None)
    replicas = [rig.replica("a"), rig.replica("b")]
    clients = [rig.client(r) for r in replicas]
    await rig.budget(clients[0])
    load = Load(rig, delay=0.25)
    in_flight_at_kill = 0
    for n in range(KILLS):
        victim = n % 2
        survivor = clients[1 - victim]
        threads = [await load.thread(survivor) for _ in range(PER_ROUND)]
        posts = [asyncio.create_task(load.post(clients, t)) for t in threads]
        # The injection point, not a synchronization: a random offset into the round.
        await asyncio.sleep(rng.uniform(0.0, 1.2))
        in_flight_at_kill += sum(not p.done() for p in posts)
        port = replicas[victim].port
        replicas[victim].kill()
        await asyncio.gather(*posts)
        replicas[victim] = await asyncio.to_thread(rig.replica, "ab"[victim], port)
    figures = await rig.check(load)
    assert load.unaccepted == 0
    print(f"\nFAULT sigkill: kills={KILLS} in flight=conversations with a tool call each "
          f"(posts in transit at a kill: {in_flight_at_kill}); checked one turn per message, "
          f"typed ends, ledger, tool runs; {figures.line()}")
