"""The process's PostgreSQL connections (layer: store; imports asyncpg).

A pool of asyncpg connections, made for what ator does with them: one autocommit statement at
a time on the turn's path (`fetch`), and now and then a connection held for a transaction, a
session lock or LISTEN (`acquire`). asyncpg's own pool cost 40 µs of CPU per statement on top
of the statement itself (a shielded task and a timer per release, a proxy per acquire): 9% of
a bench turn's instructions for three statements. Here a statement takes an idle connection
and puts it back without awaiting anything else.

- Idle connections are a stack: the last one put back is the next one taken, so a light load
  keeps using the same warm few and the rest age out (closed after `idle_close_s` idle, down to
  `min_size`, checked once a minute or once per `idle_close_s` if that is shorter).
- When all `max_size` are in use, callers wait in order and each returned connection goes to
  the first caller still waiting.
- A connection is put back only when it is known to be clean: open, not in a transaction, and
  not interrupted mid-statement (a cancellation, a timeout, a lost socket or a client-side
  protocol error). Otherwise it is terminated and its place is free for a new one. An error
  the server reported (a constraint, bad data) leaves it clean: the server had answered in full.
- `close()` closes the idle ones and waits a bounded time for the rest to come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Generator
from types import TracebackType
from typing import Any

import asyncpg

__all__ = ["Pool"]

Connect = Callable[[], Awaitable[asyncpg.Connection]]

# Exceptions that can leave a connection mid-statement. ValueError subclasses among asyncpg's
# interface errors (an argument that does not encode, a bad setting) are raised before anything
# is sent, so they leave it clean.
_INTERRUPTED = (asyncio.CancelledError, TimeoutError, OSError, asyncpg.InterfaceError,
                asyncpg.InternalClientError)
_TRIM_EVERY_S = 60.0


def _interrupted(exc: BaseException | None) -> bool:
    return isinstance(exc, _INTERRUPTED) and not isinstance(exc, ValueError)


class Pool:
    """Up to `max_size` connections made by `connect` (which also runs their set-up)."""

    def __init__(self, connect: Connect, *, min_size: int, max_size: int,
                 idle_close_s: float = 300.0) -> None:
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ValueError(f"pool sizes must satisfy 0 <= min ({min_size}) <= max ({max_size})"
                             " and max >= 1")
        self._connect = connect
        self._min = min_size
        self._max = max_size
        self._idle_close_s = idle_close_s
        self._idle: list[tuple[asyncpg.Connection, float]] = []  # (connection, idle since)
        self._all: set[asyncpg.Connection] = set()
        self._opening = 0  # connections being made (they count against max_size)
        # A waiter is given a connection, or None: a place is free, make one.
        self._waiters: deque[asyncio.Future[asyncpg.Connection | None]] = deque()
        self._closing = False
        self._trimmer: asyncio.TimerHandle | None = None
        self._closers: set[asyncio.Task[None]] = set()
        self._drained = asyncio.Event()  # closing, and every connection is back

    @classmethod
    async def open(cls, connect: Connect, *, min_size: int, max_size: int,
                   idle_close_s: float = 300.0) -> Pool:
        """A pool with `min_size` connections made (an unreachable server raises here)."""
        pool = cls(connect, min_size=min_size, max_size=max_size, idle_close_s=idle_close_s)
        made = [await pool._make() for _ in range(min_size)]
        for conn in made:
            pool._give(conn)
        return pool

    # The hot path -------------------------------------------------------------------------

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Run one statement (autocommit) on an idle connection and return its rows."""
        conn = self._take_idle() or await self._take()
        try:
            rows: list[asyncpg.Record] = await conn.fetch(sql, *args)
        except BaseException as exc:
            self._give(conn, interrupted=_interrupted(exc))
            raise
        self._give(conn)
        return rows

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any, column: int = 0) -> Any:
        rows = await self.fetch(sql, *args)
        return rows[0][column] if rows else None

    async def execute(self, sql: str, *args: Any) -> str:
        """Run one statement and return its status tag (`UPDATE 3`)."""
        async with self.acquire() as conn:
            status: str = await conn.execute(sql, *args)
            return status

    # Holding a connection -----------------------------------------------------------------

    def acquire(self) -> _Held:
        """`async with pool.acquire() as conn:`, or `conn = await pool.acquire()` and then
        `await pool.release(conn)`."""
        return _Held(self)

    async def release(self, conn: asyncpg.Connection) -> None:
        self._give(conn)

    def is_closing(self) -> bool:
        return self._closing

    @property
    def size(self) -> int:
        """Connections open or being made."""
        return len(self._all) + self._opening

    async def close(self, grace_s: float = 5.0) -> None:
        """Close the idle connections, wait up to `grace_s` for the ones in use to come back,
        then terminate what is still out. Waiting callers get InterfaceError."""
        if self._closing:
            return
        self._closing = True
        if self._trimmer is not None:
            self._trimmer.cancel()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(asyncpg.InterfaceError("pool is closing"))
        idle, self._idle = self._idle, []
        self._all.difference_update(conn for conn, _ in idle)
        await asyncio.gather(*(self._close(conn) for conn, _ in idle))
        if self._all:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), grace_s)
        for conn in list(self._all):
            conn.terminate()
            self._all.discard(conn)
        if self._closers:
            await asyncio.gather(*self._closers, return_exceptions=True)

    # Inside -------------------------------------------------------------------------------

    def _take_idle(self) -> asyncpg.Connection | None:
        while self._idle:
            conn, _since = self._idle.pop()
            if not conn.is_closed():
                return conn
            self._all.discard(conn)  # the server closed it while idle
        return None

    async def _take(self) -> asyncpg.Connection:
        if self._closing:
            raise asyncpg.InterfaceError("pool is closing")
        found = self._take_idle()
        if found is not None:
            return found
        if self.size < self._max:
            return await self._make()
        waiter: asyncio.Future[asyncpg.Connection | None] = (
            asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            given = await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                got = waiter.result()  # handed over just as we were cancelled: pass it on
                if got is not None:
                    self._give(got)
                else:
                    self._free_place()
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise
        return given if given is not None else await self._make()

    async def _make(self) -> asyncpg.Connection:
        self._opening += 1
        try:
            conn = await self._connect()
        except BaseException:
            self._opening -= 1
            self._free_place()
            raise
        self._opening -= 1
        if self._closing:
            conn.terminate()
            raise asyncpg.InterfaceError("pool is closing")
        self._all.add(conn)
        if self._trimmer is None and self._idle_close_s > 0:
            self._schedule_trim()
        return conn

    def _give(self, conn: asyncpg.Connection, *, interrupted: bool = False) -> None:
        if conn not in self._all:
            return  # already given back, or terminated by close()
        if interrupted or self._closing or conn.is_closed() or conn.is_in_transaction():
            self._all.discard(conn)
            conn.terminate()
            if self._closing and not self._all:
                self._drained.set()
            self._free_place()
            return
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append((conn, time.monotonic()))

    def _free_place(self) -> None:
        """A place below max_size is free: the first waiter makes a connection in it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _schedule_trim(self) -> None:
        every = min(_TRIM_EVERY_S, self._idle_close_s)
        self._trimmer = asyncio.get_running_loop().call_later(every, self._trim)

    def _trim(self) -> None:
        """Close connections idle longer than idle_close_s, the coldest first, down to
        min_size (the stack's bottom holds the longest idle)."""
        cutoff = time.monotonic() - self._idle_close_s
        while (len(self._idle) and self._idle[0][1] < cutoff
               and len(self._all) + self._opening > self._min):
            conn, _since = self._idle.pop(0)
            self._all.discard(conn)
            task = asyncio.get_running_loop().create_task(self._close(conn))
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)
        if not self._closing:
            self._schedule_trim()

    @staticmethod
    async def _close(conn: asyncpg.Connection) -> None:
        try:
            await conn.close(timeout=2.0)
        except (OSError, TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresError):
            conn.terminate()


class _Held:
    """What `Pool.acquire()` returns: awaitable for a connection, or a context holding one."""

    __slots__ = ("_conn", "_pool")

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._conn: asyncpg.Connection | None = None

    def __await__(self) -> Generator[Any, None, asyncpg.Connection]:
        return self._pool._take().__await__()

    async def __aenter__(self) -> asyncpg.Connection:
        self._conn = await self._pool._take()
        return self._conn

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._give(conn, interrupted=_interrupted(exc))
