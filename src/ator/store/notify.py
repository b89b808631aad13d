"""LISTEN on a PostgreSQL channel for a block (layer: store; imports asyncpg, ator.store.database).

NOTIFY is transactional: a notification sent inside a transaction is delivered when (and
only if) it commits, so a listener told about a row can read it. The jobs queue
(`ator_jobs`) and the run event log (`ator_run_events`, store/run_events.py) both wake their
readers this way; `listen` is their one way to hold the channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ator.store.database import Database

__all__ = ["listen"]


@asynccontextmanager
async def listen(db: Database, channel: str,
                 on_notify: Callable[[str], None]) -> AsyncIterator[asyncio.Event]:
    """LISTEN on `channel` on a connection held for the block; `on_notify(payload)` is
    called (synchronously) for every notification. Yields an event set when the connection
    is lost (the caller listens again and re-reads meanwhile). Raises when no connection
    can be had."""
    lost = asyncio.Event()

    def handler(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        on_notify(payload)

    def terminated(_conn: object) -> None:
        lost.set()

    # Held as a context, so the pool sees how the block ended: a connection interrupted
    # mid-UNLISTEN (a cancellation) is not given to the next user.
    async with db.pool.acquire() as conn:
        conn.add_termination_listener(terminated)
        await conn.add_listener(channel, handler)
        try:
            yield lost
        finally:
            conn.remove_termination_listener(terminated)
            if not conn.is_closed():
                await conn.remove_listener(channel, handler)  # also UNLISTENs
