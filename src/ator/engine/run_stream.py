"""A workflow run's event log from a cursor on: what it missed from the database, then live
(layer: engine; imports coord, store.workflows, engine.stream, workflows.kinds).

The same follow as a thread's (`stream.LogFollow`): the run's channel is subscribed before
the database is read, each event is yielded once and in `seq` order. The reconciler
publishes a bare "look" notice on the run's channel after each of its commits (every
change to a run wakes it, so every event is followed by one); a follower reads the new
events from the database. A frame is

    {"v": 1, "seq": int, "type": <kind>, "data": {"run_id", "data", "created_at"}}
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any
from uuid import UUID

from ator.coord.base import Coordinator
from ator.engine.stream import LogFollow, follow_frames
from ator.errors import NotFound
from ator.store import workflows as run_store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.workflows.kinds import run_channel

__all__ = ["RunFollow", "check_run", "run_frame", "run_frames"]


def run_frame(run_id: UUID, row: Any) -> dict[str, Any]:
    return {"v": 1, "seq": int(row["seq"]), "type": row["kind"],
            "data": {"run_id": str(run_id), "data": row["data"],
                     "created_at": row["created_at"].isoformat()}}


async def check_run(db: Database, scope: Scope, run_id: UUID) -> None:
    if await run_store.get_run(db, scope, run_id) is None:
        raise NotFound("no such run")


class RunFollow(LogFollow):
    def __init__(self, db: Database, coord: Coordinator, scope: Scope, run_id: UUID, *,
                 after_seq: int | None, inbox: int = 64) -> None:
        super().__init__(db, coord, scope, run_channel(run_id), after_seq=after_seq,
                         inbox=inbox)
        self.run_id = run_id

    async def read_page(self, after_seq: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        rows = await run_store.events(self.db, self.scope, self.run_id, after=after_seq,
                                      limit=limit)
        return len(rows), [run_frame(self.run_id, r) for r in rows]


async def run_frames(db: Database, coord: Coordinator, scope: Scope, run_id: UUID, *,
                     after_seq: int, keepalive: float | None
                     ) -> AsyncGenerator[dict[str, Any] | None, None]:
    """Checks the run first (NotFound for another org's), then its frames until closed."""
    await check_run(db, scope, run_id)
    return _frames(db, coord, scope, run_id, after_seq, keepalive)


async def _frames(db: Database, coord: Coordinator, scope: Scope, run_id: UUID,
                  after_seq: int, keepalive: float | None
                  ) -> AsyncGenerator[dict[str, Any] | None, None]:
    async with RunFollow(db, coord, scope, run_id, after_seq=after_seq) as follow:
        async for frame in follow_frames(follow, keepalive):
            yield frame
