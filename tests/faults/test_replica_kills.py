"""Fault: a replica SIGKILLed again and again at random offsets while conversations are in
flight (two `ator serve` replicas on one PostgreSQL and Redis; each killed one is started
again on its port, as a supervisor would). Afterwards, for every message the API accepted
(a 202, resent with its client id across failures): exactly one mailbox row, consumed by
exactly one turn, shown exactly once in the event log; every turn ended with a typed status;
no money is left reserved. The figures are printed (run with -s) and are in the note.

    FAULT_KILLS=50 pytest tests/faults/test_replica_kills.py -s   (default 6 kills)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest

from tests.e2e.client import script_setup
from tests.e2e.conftest import Deployment, DeploymentFactory
from tests.e2e.replica import Replica

pytestmark = [pytest.mark.e2e, pytest.mark.redis, pytest.mark.faults]

KILLS = int(os.environ.get("FAULT_KILLS", "6"))
THREADS = 4
ROUND_GAP = 0.3  # seconds between rounds of messages: a steady load, not a flood
TYPED = {"done", "cancelled", "error", "lost", "capped", "budget", "stopped", "timeout",
         "waiting"}


@dataclass
class Load:
    replicas: dict[str, Replica]
    alive: set[str]
    accepted: set[tuple[str, str]] = field(default_factory=set)
    unconfirmed: set[tuple[str, str]] = field(default_factory=set)
    retries: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def _post(load: Load, key: str, thread_id: str, cmid: str) -> None:
    """Post one message, resending it (same client id) to a live replica until a 202."""
    body = {"text": f"message {cmid}", "client_message_id": cmid}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        names = sorted(load.alive) or sorted(load.replicas)
        replica = load.replicas[random.choice(names)]
        try:
            async with httpx.AsyncClient(base_url=replica.url, timeout=10) as client:
                got = await client.post(f"/v1/threads/{thread_id}/messages", json=body,
                                        headers={"Authorization": f"Bearer {key}"})
        except httpx.TransportError:
            load.retries += 1
            continue
        if got.status_code == 202:
            load.accepted.add((thread_id, cmid))
            return
        load.retries += 1
        await asyncio.sleep(0.05)  # a 5xx/503 while a replica restarts: try another
    load.unconfirmed.add((thread_id, cmid))


async def _conversations(load: Load, key: str, threads: list[str]) -> int:
    n = 0
    while not load.stop.is_set():
        await asyncio.gather(*(_post(load, key, t, f"m{n}-{i}") for i, t in enumerate(threads)))
        n += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(load.stop.wait(), ROUND_GAP)
    return n


async def _start(deployment: Deployment, name: str, env: dict[str, str],
                 port: int | None = None) -> Replica:
    """Start a replica (the killed one again on its port); ready when /readyz says so (a
    process start is the one thing polled: nothing outside it can be waited on)."""
    again = Replica.launch(name, deployment.log_dir, env, port)
    deployment.replicas.append(again)
    last = ""
    deadline = time.monotonic() + 180  # a loaded 2-core CI machine starts a replica slowly
    async with httpx.AsyncClient(base_url=again.url, timeout=2) as client:
        while time.monotonic() < deadline:
            assert again.proc.poll() is None, f"{name} exited:\n{again.log()}"
            try:
                got = await client.get("/readyz")
                if got.status_code == 200:
                    return again
                last = got.text
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"{name} not ready: {last}")


async def _kill_loop(deployment: Deployment, load: Load, kills: int) -> list[float]:
    offsets = []
    rng = random.Random(int(os.environ.get("FAULT_SEED", "25")))
    for k in range(kills):
        offset = rng.uniform(0.2, 1.5)
        offsets.append(offset)
        await asyncio.sleep(offset)  # a random point in the load: the fault, not a wait
        name = sorted(load.replicas)[k % 2]
        victim = load.replicas[name]
        load.alive.discard(name)
        victim.kill()
        again = await _start(deployment, f"{name}-{k}", victim.env, victim.port)
        load.replicas[name] = again
        load.alive.add(name)
    return offsets


async def _settled(conn: asyncpg.Connection, org_id: str) -> bool:
    pending = await conn.fetchval(
        "SELECT count(*) FROM mailbox WHERE org_id = $1 AND turn_id IS NULL", uuid.UUID(org_id))
    running = await conn.fetchval(
        "SELECT count(*) FROM turns WHERE org_id = $1 AND status = 'running'",
        uuid.UUID(org_id))
    return pending == 0 and running == 0


@pytest.mark.timeout(1800)
async def test_replicas_sigkilled_in_a_loop_lose_and_double_nothing(
        deployments: DeploymentFactory, e2e_database_url: str) -> None:
    deployment = deployments(redis=True, ATOR_LEASE_TTL=2.0, ATOR_REAPER_INTERVAL=0.5,
                             clean_logs=False)
    a = await _start(deployment, "fault-a", deployment.env)
    b = await _start(deployment, "fault-b", deployment.env)
    admin = deployment.client(a)
    who = await admin.ok("GET", "/v1/sessions/current")
    org_id = who["org_id"]
    setup = await admin.create_setup(script_setup({"text": "ok", "delay": 0.3}))
    threads = [(await admin.create_thread(setup["id"]))["id"] for _ in range(THREADS)]
    load = Load({"a": a, "b": b}, {"a", "b"})

    started = time.monotonic()
    talking = asyncio.create_task(_conversations(load, deployment.admin_key, threads))
    offsets = await _kill_loop(deployment, load, KILLS)
    load.stop.set()
    rounds = await talking
    loaded = time.monotonic() - started

    conn = await asyncpg.connect(e2e_database_url.replace("+asyncpg", ""))
    try:
        deadline = time.monotonic() + 120
        while not await _settled(conn, org_id):
            assert time.monotonic() < deadline, "turns did not settle after the faults"
            await asyncio.sleep(0.2)
        settled = time.monotonic() - started - loaded
        org = uuid.UUID(org_id)
        rows = await conn.fetch(
            "SELECT m.id, m.thread_id::text AS t, m.client_message_id AS c, m.turn_id,"
            "       t.status FROM mailbox m JOIN turns t ON t.id = m.turn_id"
            " WHERE m.org_id = $1", org)
        stored = {(r["t"], r["c"]) for r in rows}
        # Every accepted message is stored once and consumed by a turn; nothing else is.
        assert load.accepted <= stored, load.accepted - stored
        assert stored <= load.accepted | load.unconfirmed
        assert len(rows) == len(stored)
        shown = Counter(r["m"] for r in await conn.fetch(
            "SELECT data->>'mailbox_id' AS m FROM events WHERE org_id = $1 AND kind = 'message'",
            org))
        assert all(shown[str(r["id"])] == 1 for r in rows), "a message shown twice or never"
        statuses = Counter(r["status"] for r in await conn.fetch(
            "SELECT status FROM turns WHERE org_id = $1", org))
        assert set(statuses) <= TYPED, statuses
        reserved = await conn.fetchval(
            "SELECT COALESCE(sum(reserved_usd), 0) FROM turns WHERE org_id = $1", org)
        held = await conn.fetchval(
            "SELECT COALESCE(sum(reserved_usd), 0) FROM org_usage WHERE org_id = $1", org)
        assert reserved == 0 and held == 0
    finally:
        await conn.close()
    print(f"\nfault: SIGKILL x{KILLS} (offsets {min(offsets):.2f}-{max(offsets):.2f} s) over "
          f"{loaded:.1f} s of load on {THREADS} threads, {rounds} rounds; accepted "
          f"{len(load.accepted)} messages ({len(load.unconfirmed)} never confirmed, "
          f"{load.retries} resends); settled {settled:.1f} s after the last kill; turns "
          f"{dict(statuses)}; reserved after: {reserved} / {held}")
