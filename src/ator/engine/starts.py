"""Group commit of the turns that messages to idle threads start (layer: engine; imports
store).

A message to an idle thread is one statement: its mailbox insert is its turn's start
(`store.turns.post_turn`). A burst of them (a thousand users at once) paid a round trip, a
commit and a statement's share of the event loop each, and queued for the pool's connections
meanwhile. Here the starts that arrive while others are being written go out together, as one
`post_turns` statement: the start of a quiet moment goes at once, alone (nothing waits for a
batch to fill), and a burst is written in a few statements of up to `MAX_BATCH` threads each,
at most `MAX_IN_FLIGHT` at a time.

Nothing about a start changes with its company: each thread's lease is held by its pump, the
insert is the same unique-per-client-id insert, and each poster hears its own outcome (its
item, None for a resend, NotFound for another org's thread). A batch is one transaction, so
a value the database refuses in one post would fail the rest: such a batch is written again
entry by entry, and only the bad entry fails.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Final

from ator.errors import CoordinationError, NotFound
from ator.store import turns as turn_store
from ator.store.database import Database
from ator.store.turns import Columns, Started, Starting

__all__ = ["MAX_BATCH", "MAX_IN_FLIGHT", "StartBatcher"]

#: Start statements in flight at once: one being written while the next batch gathers keeps
#: the database busy; more only splits a burst into smaller batches.
MAX_IN_FLIGHT: Final = 2
#: Threads per statement: a batch of 100 posts is a few milliseconds of PostgreSQL's time.
MAX_BATCH: Final = 100

_Waiting = tuple[Starting, "asyncio.Future[Started]"]


class StartBatcher:
    """Starts posted turns: alone while a slot is free, else with the others that came
    meanwhile, in one statement."""

    def __init__(self, db: Database, *, owner: str, columns: Columns = (),
                 item_columns: Columns = ()) -> None:
        self.db = db
        self.owner = owner
        self.columns = tuple(columns)
        self.item_columns = tuple(item_columns)
        self._queue: deque[_Waiting] = deque()
        self._flying = 0
        self._drains: set[asyncio.Task[None]] = set()

    async def post(self, starting: Starting) -> Started:
        """What `store.turns.post_turn` returns for this entry (raises what it raises)."""
        if self._flying < MAX_IN_FLIGHT:
            self._flying += 1
            try:
                return self._outcome((await self._write([starting]))[0])
            finally:
                self._landed()
        future: asyncio.Future[Started] = asyncio.get_running_loop().create_future()
        self._queue.append((starting, future))
        return await future

    def _landed(self) -> None:
        """A statement ended: its slot goes to the starts that queued meanwhile."""
        self._flying -= 1
        if self._queue and self._flying < MAX_IN_FLIGHT:
            self._flying += 1
            task = asyncio.create_task(self._drain(), name="ator-turn-starts")
            self._drains.add(task)
            task.add_done_callback(self._drains.discard)

    def _batch(self) -> list[_Waiting]:
        """Up to MAX_BATCH queued starts, a thread at most once (a second start of one
        thread waits for the next batch), none whose poster is gone."""
        batch: list[_Waiting] = []
        threads: set[object] = set()
        later: list[_Waiting] = []
        while self._queue and len(batch) < MAX_BATCH:
            waiting = self._queue.popleft()
            if waiting[1].done():
                continue  # its poster was cancelled before its start was written
            if waiting[0].thread_id in threads:
                later.append(waiting)
                continue
            threads.add(waiting[0].thread_id)
            batch.append(waiting)
        self._queue.extendleft(reversed(later))
        return batch

    async def _drain(self) -> None:
        batch: list[_Waiting] = []
        try:
            batch = self._batch()
            if batch:
                await self._settle(batch)
        except BaseException:
            cut = CoordinationError("the turn was cut off while starting; resend the message")
            for _starting, future in batch:
                if not future.done():
                    future.set_exception(cut)
            raise
        finally:
            self._landed()

    async def _settle(self, batch: list[_Waiting]) -> None:
        try:
            results = await self._write([s for s, _f in batch])
        except Exception as exc:
            if len(batch) == 1:
                if not batch[0][1].done():
                    batch[0][1].set_exception(exc)
                return
            for starting, future in batch:  # so that only the entry at fault fails
                result: Started | NotFound | Exception
                try:
                    result = (await self._write([starting]))[0]
                except Exception as one:
                    result = one
                self._resolve(future, result)
            return
        for (_s, future), result in zip(batch, results, strict=True):
            self._resolve(future, result)

    def _resolve(self, future: asyncio.Future[Started],
                 result: Started | NotFound | Exception) -> None:
        if future.done():
            return
        if isinstance(result, Exception):
            future.set_exception(result)
        else:
            future.set_result(result)

    @staticmethod
    def _outcome(result: Started | NotFound) -> Started:
        if isinstance(result, NotFound):
            raise result
        return result

    async def _write(self, starting: Sequence[Starting]) -> list[Started | NotFound]:
        return await turn_store.post_turns(self.db, starting, owner=self.owner,
                                           columns=self.columns,
                                           item_columns=self.item_columns)
