"""The reaper: one leader closes turns whose owner died and re-wakes forgotten threads
(layer: engine; imports coord, store, engine.actor, engine.turn).

Every replica runs a Reaper; only the one holding the `lease:reaper` lease acts. Each tick:
1. turns still `running` whose heartbeat is older than the lease TTL are closed as
   `error:lost` with a `turn_ended` event, so the thread is usable again and its history
   stays valid; a lost subagent's parent is told (`errored`, reason `lost`) in the same
   statement, and woken. The leader's own turns are no exception, except those it is
   running right now: a turn whose task ended without writing its end (the database was
   away) is lost, whichever process it belonged to;
2. threads with mailbox items pending for longer than the TTL (the replica that accepted
   them died before running them) are woken. This is also the reconciler of results that
   were claimed (pushed into a parent's mailbox) but whose wake was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from ator.coord.base import Coordinator
from ator.engine.actor import Actor
from ator.engine.turn import TurnRunner
from ator.obs.logging import get_logger
from ator.store import ledger
from ator.store import mailbox as mailbox_store
from ator.store import turns as turn_store
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["Reaper"]

log = get_logger("ator.engine.reaper")
_LEASE = "lease:reaper"


class Reaper:
    def __init__(
        self,
        *,
        db: Database,
        coord: Coordinator,
        actor: Actor,
        runner: TurnRunner,
        owner: str,
        ttl: float,
        interval: float,
    ) -> None:
        self.db = db
        self.coord = coord
        self.actor = actor
        self.runner = runner
        self.owner = owner
        self.token = f"{owner}:reaper:{uuid.uuid4().hex[:8]}"
        self.ttl = ttl
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ator-reaper")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.coord.release(_LEASE, self.token)

    async def _run(self) -> None:
        while True:
            try:
                if await self.coord.acquire(_LEASE, self.token, self.interval * 3):
                    await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("reaper tick failed")
            await asyncio.sleep(self.interval)

    async def tick(self) -> int:
        """One sweep; returns how many turns it closed."""
        # The turns we run are late after a stall of this loop, never lost: refresh their
        # rows for the other replicas' sweeps, and leave them out of ours (a stall can fall
        # between the beat and the sweep). Only those: a turn of ours whose task is gone
        # (its end could not be written) is lost like any other, or nobody would close it.
        await self.actor.heartbeats.beat()
        lost = await turn_store.reap_lost_turns(
            self.db, self.ttl, running=self.actor.heartbeats.turn_ids())
        # Lost turns (and any turn whose end did not settle) give back their reservations.
        await ledger.release_closed(self.db)
        for turn in lost:
            log.warning("closed lost turn", extra={"lost_turn": str(turn.turn_id),
                                                   "owner": turn.owner})
            # Tell listeners (waiters, sockets) the turn ended; the event is already committed.
            await self.runner.publisher.events(Scope(turn.org_id), turn.thread_id, [turn.ended])
            if turn.told_parent is not None:  # a lost subagent's parent was told: wake it
                await self.actor.notify(Scope(turn.org_id), turn.told_parent)
        for org_id, thread_id in await mailbox_store.pending_threads(self.db, older_than=self.ttl):
            self.actor.wake(Scope(org_id), thread_id, force=True)
        return len(lost)

