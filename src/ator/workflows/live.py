"""Following a run's event log live (layer: workflows; imports ator.errors, ator.obs,
ator.store).

A run's events are committed by many writers (the service, the reconciler, step attempts);
each commit NOTIFYs `ator_run_events` with the run's id (store/run_events.py). `RunEvents`
holds ONE listening connection per process, opened when the first reader follows a run,
and wakes the readers of that run; a reader then reads what it missed from its cursor
(dense per-run `seq`), so a lost or folded notice costs nothing but a read, and a reader
re-reads after `recheck` quiet seconds in case the listening connection was lost.

Step progress is coalesced: a reader woken again within `COALESCE` seconds of its last
read waits out the rest of that window and reads everything committed meanwhile in one
page (a 1,000-item map ends its items in 1,000 commits; a reader sees a few batches).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from uuid import UUID

from ator.errors import NotFound
from ator.obs.logging import get_logger
from ator.store import run_events
from ator.store import workflows as run_store
from ator.store.database import Database, Row
from ator.store.scope import Scope

__all__ = ["COALESCE", "RunEvents"]

log = get_logger("ator.workflows.live")

COALESCE = 0.1  # seconds: the least time between two reads of one reader
_PAGE = 500
_RETRY = (0.2, 5.0)


class RunEvents:
    """Runs' event logs, replayed from a cursor and then live."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._listener: asyncio.Task[None] | None = None

    async def last_seq(self, scope: Scope, run_id: UUID) -> int:
        """The run's last committed seq. Raises NotFound (also another org's run)."""
        run = await run_store.get_run(self.db, scope, run_id)
        if run is None:
            raise NotFound("no such run")
        return int(run["event_seq"])

    async def read(self, scope: Scope, run_id: UUID, *, after_seq: int,
                   limit: int = _PAGE) -> list[Row]:
        return await run_store.events(self.db, scope, run_id, after=after_seq, limit=limit)

    async def follow(self, scope: Scope, run_id: UUID, *, after_seq: int, recheck: float
                     ) -> AsyncGenerator[list[Row] | None, None]:
        """Batches of the run's events after `after_seq`, in seq order, each event once,
        until the caller stops; None after `recheck` quiet seconds (a heartbeat cue).
        Subscribed before the first read, so nothing committed meanwhile is missed."""
        wake = asyncio.Event()
        key = str(run_id)
        self._waiters.setdefault(key, set()).add(wake)
        self._ensure_listener()
        try:
            seq, last_read = after_seq, 0.0
            while True:
                wake.clear()
                last_read = time.monotonic()
                while rows := await self.read(scope, run_id, after_seq=seq):
                    seq = int(rows[-1]["seq"])
                    yield rows
                    if len(rows) < _PAGE:
                        break
                try:
                    async with asyncio.timeout(recheck):
                        await wake.wait()
                except TimeoutError:
                    yield None
                    continue
                # Coalesce: the rest of this reader's window gathers more commits.
                left = last_read + COALESCE - time.monotonic()
                if left > 0:
                    await asyncio.sleep(left)
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiters[key]

    def _ensure_listener(self) -> None:
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="ator-run-events-listen")

    def _told(self, run_id: str) -> None:
        for wake in self._waiters.get(run_id, ()):
            wake.set()

    async def _listen(self) -> None:
        pause = _RETRY[0]
        while True:
            try:
                async with run_events.listen(self.db, self._told) as lost:
                    pause = _RETRY[0]
                    for waiters in list(self._waiters.values()):  # what came before LISTEN
                        for wake in waiters:
                            wake.set()
                    await lost.wait()
            except Exception:  # the database went away: logged, listened to again
                log.warning("LISTEN for run events failed; readers re-read meanwhile",
                            exc_info=True)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY[1])

    async def aclose(self) -> None:
        task, self._listener = self._listener, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
