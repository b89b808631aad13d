"""A turn in flight when a dependency goes away still ends with a typed status, on the
replica that runs it, while that replica lives.

- PostgreSQL away mid-turn: the turn's writes fail, its end cannot be written either, and
  its task ends. Its row says `running` with nobody beating it; the reaper of the same
  replica closes it (`error:lost`) once the database is back. (It used to leave every turn
  of its own process to "its actor", which had given up on it: running for good.)
- Redis away just as a turn starts: the `turn_started` announcement fails after the turn's
  row committed. The turn ends at once, typed (`error:coordination`), written to the
  database that is still there. (It used to escape before the turn could end: running for
  good, and no reaper acts without Redis.)

The dependency is reached through a TCP proxy (tests/tcp_proxy.py) that the test cuts and
restores; the state is read straight from the database, not through the process under test.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from tests.conftest import REDIS_URL, new_thread, until
from tests.tcp_proxy import Proxy


class Gated:
    """The first call streams a little, then waits for `go`; every call then ends the turn."""

    name = "gated"

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        if self.calls == 1:
            yield TextDelta("working")
            self.entered.set()
            await self.go.wait()
        yield TextDelta("done")
        yield MessageStop("end_turn", Usage(1, 1), request.model)


def _plain(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _through(url: str, proxy: Proxy) -> str:
    return make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(
        hide_password=False)


async def _turns(conn: asyncpg.Connection, thread_id: uuid.UUID) -> list[dict[str, Any]]:
    rows = await conn.fetch(
        "SELECT id, status, stop_reason, error, reserved_usd FROM turns WHERE thread_id = $1 "
        "ORDER BY started_at", thread_id)
    return [dict(r) for r in rows]


async def _ended(conn: asyncpg.Connection, thread_id: uuid.UUID, deadline: float
                 ) -> list[dict[str, Any]]:
    """The thread's turns once none of them runs (fails after `deadline` seconds)."""
    turns: list[dict[str, Any]] = []

    async def settled() -> bool:
        turns[:] = await _turns(conn, thread_id)
        return bool(turns) and all(t["status"] != "running" for t in turns)

    try:
        async with asyncio.timeout(deadline):
            while not await settled():  # noqa: ASYNC110 (another process's state, polled)
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"a turn still runs after {deadline:g}s: {turns}") from None
    return turns


async def test_a_turn_whose_database_went_away_mid_turn_is_closed_by_its_own_replica(
    make_ator, database_url: str,
) -> None:
    target = make_url(database_url)
    proxy = Proxy(target.host or "127.0.0.1", target.port or 5432)
    await proxy.start()
    provider = Gated()
    direct = await asyncpg.connect(_plain(database_url))
    try:
        async with make_ator(providers={"gated": provider}, database_url=_through(
                database_url, proxy), lease_ttl=0.5, reaper_interval=0.1) as ator:
            scope, thread = await new_thread(ator, "gated")
            await ator.submit(scope, thread.id, "work")
            await asyncio.wait_for(provider.entered.wait(), 10)

            await proxy.cut()
            try:
                provider.go.set()  # the reply's write fails, then the end's write too
                await until(lambda: thread.id not in ator.actor.running, 30)
                [gone] = await _turns(direct, thread.id)
                assert gone["status"] == "running"  # nobody could write its end
            finally:
                await proxy.restore()
            [turn] = await _ended(direct, thread.id, 15)
            assert (turn["status"], turn["stop_reason"]) == ("lost", "error:lost")
            assert turn["error"] and turn["reserved_usd"] == 0
            # Only that turn was closed, and the thread works again.
            result = await ator.ask(scope, thread.id, "still there?", timeout=15)
            assert result.stop_reason == "end_turn"
    finally:
        await direct.close()
        await proxy.cut()


@pytest.mark.redis
async def test_a_turn_whose_start_could_not_be_announced_ends_typed_at_once(
    make_ator, database_url: str,
) -> None:
    target = urlsplit(REDIS_URL)
    proxy = Proxy(target.hostname or "127.0.0.1", target.port or 6379)
    await proxy.start()
    provider = Gated()
    provider.go.set()
    direct = await asyncpg.connect(_plain(database_url))
    blocker = await asyncpg.connect(_plain(database_url))
    try:
        # A long lease and a slow reaper: the turn must end by itself, not be reaped.
        async with make_ator(providers={"gated": provider},
                             redis_url=f"redis://127.0.0.1:{proxy.port}{target.path}",
                             redis_prefix=f"ator-deploss-{uuid.uuid4().hex[:8]}:",
                             lease_ttl=30.0, reaper_interval=60.0) as ator:
            scope, thread = await new_thread(ator, "gated")
            # Hold the thread's row, so the turn's start statement waits on it: Redis goes
            # away while it waits, and is gone when the statement has committed.
            lock = blocker.transaction()
            await lock.start()
            await blocker.execute(
                "SELECT 1 FROM threads WHERE id = $1 FOR NO KEY UPDATE", thread.id)
            # A message to an idle thread starts its turn in the same statement (the post
            # path), so the submit itself waits on the row: it runs beside the test.
            posting = asyncio.create_task(ator.submit(scope, thread.id, "work"))
            await until_waiting(direct, 15)
            await proxy.cut()
            try:
                await lock.rollback()
                [turn] = await _ended(direct, thread.id, 30)
            finally:
                await proxy.restore()  # for the shutdown: it releases leases
            await asyncio.wait_for(posting, 15)  # accepted: its turn ended typed
            assert (turn["status"], turn["stop_reason"]) == ("error", "error:coordination")
            assert turn["error"] and turn["reserved_usd"] == 0
            assert provider.calls == 0  # ended before any model call
    finally:
        await blocker.close()
        await direct.close()
        await proxy.cut()


async def until_waiting(conn: asyncpg.Connection, deadline: float) -> None:
    """Until a statement of another session waits on a row lock in this database."""
    async with asyncio.timeout(deadline):
        while not await conn.fetchval(  # noqa: ASYNC110 (another session's state, polled)
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"):
            await asyncio.sleep(0.02)
