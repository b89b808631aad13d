"""Live reading of a run's event log (layer: store; imports ator.store.notify, ator.store.database).

Every row written to `workflow_events` sends a NOTIFY on `CHANNEL` with the run's id (a
trigger, migration 0017: delivered at commit, folded to one per run per transaction). The
rows themselves are read with `store.workflows.events`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from ator.store import notify
from ator.store.database import Database

__all__ = ["CHANNEL", "listen"]

CHANNEL = "ator_run_events"


@asynccontextmanager
async def listen(db: Database, on_run: Callable[[str], None]) -> AsyncIterator[asyncio.Event]:
    """LISTEN for run events for the block: `on_run(run_id)` per notification; yields an
    event set when the connection is lost."""
    async with notify.listen(db, CHANNEL, on_run) as lost:
        yield lost
