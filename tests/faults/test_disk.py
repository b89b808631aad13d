"""Fault 7: the database's disk full, then freed. PostgreSQL's data dir (its WAL with it) is a
tmpfs of its own (rig.SmallDisk); while conversations run on two replicas, a file fills it to
the last byte, messages keep being posted for FULL_FOR seconds, then the file is removed.

While it is full, a request that must write answers 503 with a stable code
(`database_disk_full`), never a 500; once it is freed, posts are accepted again without a
restart of anything, and nothing accepted is lost: every accepted message produced exactly
one turn, every turn ended typed, nothing is left reserved, no tool ran twice."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter

import pytest

from tests.e2e.client import Client
from tests.faults.rig import Load, Rig, SmallDisk, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.timeout(900)]

THREADS = 24  # posted to before the disk fills, and again after it is freed
# Each thread's model calls the tool on the thread's own recorder path in every turn, so a
# post goes to a thread of its own (made before the disk fills): one turn per path.
SPARE = 2 * THREADS + int(10.0 / 0.2) + 32
FULL_FOR = 10.0  # seconds the disk stays full while messages keep coming
EVERY = 0.2  # seconds between posts while it is full
UNAVAILABLE = {"database_disk_full", "database_unavailable"}


async def test_disk_full_then_freed(rig_on_small_disk: tuple[Rig, SmallDisk]) -> None:
    rig, disk = rig_on_small_disk
    a, b = rig.replica("a"), rig.replica("b")
    clients = [rig.client(a), rig.client(b)]
    await rig.budget(clients[0])
    load = Load(rig, delay=0.5)
    threads = [await load.thread(clients[n % 2]) for n in range(SPARE)]
    answers: Counter[tuple[str, int, str | None]] = Counter()

    async def post(phase: str, n: int) -> int:
        client, thread = clients[n % 2], threads[n]
        response = await client.request("POST", f"/v1/threads/{thread}/messages",
                                        json={"text": "go", "client_message_id": uuid.uuid4().hex})
        body = response.json()
        answers[(phase, response.status_code, body.get("code"))] += 1
        if response.status_code == 202:
            load.accepted.add(body["id"])
        return response.status_code

    # Conversations under way on both replicas, then the disk fills up under them.
    for n in range(THREADS // 2):
        assert await post("before", n) == 202
    conn = await rig.pg.connect()
    try:
        await wait_for("turns running", lambda: conn.fetchval(
            "SELECT count(*) FROM turns WHERE status = 'running'"), 60, every=0.05)
        in_flight = await conn.fetchval("SELECT count(*) FROM turns WHERE status = 'running'")
    finally:
        await conn.close()
    filled = disk.fill()
    full_since = time.monotonic()
    n = THREADS // 2
    while time.monotonic() - full_since < FULL_FOR and n < SPARE - THREADS - 32:
        await post("full", n)
        n += 1
        await asyncio.sleep(EVERY)  # the load's pace, not a synchronization
    reads = await _reads_work(clients, threads)
    disk.free()

    # Freed: every thread takes a message again (the first may wait for the server to
    # notice), with no restart of PostgreSQL or of either replica.
    async def accepted_again(k: int) -> bool:
        return await post("freed", k) == 202

    freed_at = time.monotonic()
    tries = iter(range(n, n + 32))
    await wait_for("a post accepted after the disk was freed",
                   lambda: accepted_again(next(tries)), 60, every=2.0)
    back_after = time.monotonic() - freed_at
    n += 32
    for k in range(n, n + THREADS):
        assert await post("freed", k) == 202, f"not accepted after the disk was freed: {answers}"

    figures = await rig.check(load, deadline=180)
    during = {(status, code): count for (phase, status, code), count in answers.items()
              if phase == "full"}
    assert any(code == "database_disk_full" for (_, code) in during), (
        f"no request saw the full disk: {during}")
    wrong = {k: v for k, v in during.items()
             if k[0] != 202 and not (k[0] == 503 and k[1] in UNAVAILABLE)}
    assert not wrong, f"while the disk was full, answers other than 202 or 503: {wrong}"
    assert not [k for k in answers if k[1] >= 500 and k[1] != 503], f"a 5xx: {answers}"
    assert all(p.poll() is None for p in (a.proc, b.proc)), "a replica died"
    print(f"\nFAULT disk-full: {disk.size_mb} MB tmpfs filled ({filled >> 20} MB written) with "
          f"{in_flight} turns running, kept full {FULL_FOR:g}s under posts every {EVERY:g}s "
          f"(answers while full: {_answers(during)}; reads while full: {reads}), then freed "
          f"(a post accepted again after {back_after:.1f}s, no restart); checked 503 with a "
          f"stable code and no 500, one turn per accepted message, typed ends, ledger, tool "
          f"runs; {figures.line()}")


async def _reads_work(clients: list[Client], threads: list[str]) -> str:
    """Whether a read (a thread's events) still answers while the disk is full."""
    statuses: Counter[int] = Counter()
    for n, thread in enumerate(threads[:4]):
        response = await clients[n % 2].request("GET", f"/v1/threads/{thread}/events")
        statuses[response.status_code] += 1
    return ",".join(f"{k}x{v}" for k, v in sorted(statuses.items()))


def _answers(during: dict[tuple[int, str | None], int]) -> str:
    return ",".join(f"{status}/{code or '-'}x{count}"
                    for (status, code), count in sorted(during.items(), key=str))
