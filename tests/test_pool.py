"""The connection pool (store/pool.py) against a real PostgreSQL: it reuses what is clean,
never what a cancellation or an open transaction left behind, keeps to its size, and closes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from ator.store.pool import Pool


@pytest.fixture
def connect(database_url: str) -> Callable[[], asyncpg.Connection]:
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(
        hide_password=False)

    def make() -> asyncpg.Connection:
        return asyncpg.connect(dsn)

    return make  # type: ignore[return-value]


@pytest.fixture
async def pool(connect: Callable[[], asyncpg.Connection]) -> AsyncIterator[Pool]:
    pool = await Pool.open(connect, min_size=1, max_size=2)  # type: ignore[arg-type]
    yield pool
    await pool.close(grace_s=1.0)


PID = "SELECT pg_backend_pid()"


async def test_statements_one_after_another_reuse_one_warm_connection(pool: Pool) -> None:
    pids = {await pool.fetchval(PID) for _ in range(20)}
    assert len(pids) == 1 and pool.size == 1


async def test_a_burst_never_opens_more_than_max_size_and_every_caller_is_served(
    pool: Pool,
) -> None:
    rows = await asyncio.gather(*(pool.fetchrow(f"SELECT pg_backend_pid(), {i}, pg_sleep(0.05)")
                                  for i in range(8)))
    assert [r[1] for r in rows] == list(range(8))  # type: ignore[index]
    assert len({r[0] for r in rows}) == 2 and pool.size == 2  # type: ignore[index]


async def test_an_error_the_server_reports_leaves_the_connection_in_use(pool: Pool) -> None:
    before = await pool.fetchval(PID)
    with pytest.raises(asyncpg.DivisionByZeroError):
        await pool.fetch("SELECT 1 / 0")
    with pytest.raises(asyncpg.DataError):  # an argument that does not encode: nothing sent
        await pool.fetch("SELECT $1::int", "not a number")
    assert await pool.fetchval(PID) == before


async def test_a_cancelled_statement_does_not_hand_its_connection_to_the_next_caller(
    pool: Pool,
) -> None:
    before = await pool.fetchval(PID)
    task = asyncio.create_task(pool.fetch("SELECT pg_sleep(30)"))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    after = await asyncio.wait_for(pool.fetchval(PID), 5)
    assert after != before
    assert pool.size == 1


async def test_a_transaction_left_open_is_terminated_not_reused(pool: Pool) -> None:
    conn = await pool.acquire()
    await conn.execute("BEGIN")
    await conn.execute("CREATE TEMP TABLE left_behind (x int)")
    held_pid = await conn.fetchval(PID)
    await pool.release(conn)
    async with pool.acquire() as again:
        assert not again.is_in_transaction()
        assert await again.fetchval(PID) != held_pid
        assert await again.fetchval("SELECT to_regclass('pg_temp.left_behind')") is None


async def test_a_connection_the_server_closed_while_idle_is_replaced(
    pool: Pool, connect: Callable[[], asyncpg.Connection],
) -> None:
    victim = await pool.fetchval(PID)
    admin: asyncpg.Connection = await connect()  # type: ignore[misc]
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", victim) is True
    finally:
        await admin.close()
    await asyncio.sleep(0.2)
    assert await pool.fetchval(PID) != victim


async def test_a_waiter_cancelled_in_line_takes_no_place_with_it(
    connect: Callable[[], asyncpg.Connection],
) -> None:
    pool = await Pool.open(connect, min_size=0, max_size=1)  # type: ignore[arg-type]
    try:
        async with pool.acquire() as held:
            waiter = asyncio.create_task(pool.fetchval("SELECT 1"))
            await asyncio.sleep(0.05)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            pid = await held.fetchval(PID)
        assert await asyncio.wait_for(pool.fetchval(PID), 5) == pid
        assert pool.size == 1
    finally:
        await pool.close()


async def test_a_failed_connect_frees_its_place_for_the_next_caller(
    connect: Callable[[], asyncpg.Connection],
) -> None:
    failures = [OSError("connection refused")]

    async def flaky() -> asyncpg.Connection:
        if failures:
            raise failures.pop()
        return await connect()  # type: ignore[no-any-return,misc]

    pool = await Pool.open(flaky, min_size=0, max_size=1)
    try:
        with pytest.raises(OSError):
            await pool.fetchval("SELECT 1")
        assert pool.size == 0
        assert await pool.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_idle_connections_age_out_down_to_min_size(
    connect: Callable[[], asyncpg.Connection],
) -> None:
    pool = await Pool.open(connect, min_size=1, max_size=3,  # type: ignore[arg-type]
                           idle_close_s=0.2)
    try:
        await asyncio.gather(*(pool.fetch("SELECT pg_sleep(0.05)") for _ in range(3)))
        assert pool.size == 3
        for _ in range(50):
            if pool.size == 1:
                break
            await asyncio.sleep(0.05)
        assert pool.size == 1 and await pool.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_close_ends_waiters_and_what_is_in_use_and_refuses_new_work(
    connect: Callable[[], asyncpg.Connection],
) -> None:
    pool = await Pool.open(connect, min_size=1, max_size=1)  # type: ignore[arg-type]
    held = await pool.acquire()
    waiter = asyncio.create_task(pool.fetchval("SELECT 1"))
    await asyncio.sleep(0.05)
    await pool.close(grace_s=0.2)
    with pytest.raises(asyncpg.InterfaceError, match="closing"):
        await waiter
    assert held.is_closed() and pool.size == 0 and pool.is_closing()
    with pytest.raises(asyncpg.InterfaceError, match="closing"):
        await pool.fetch("SELECT 1")
