"""Keeping running turns alive, and fencing the ones that were not: one heartbeat task per
process for all of its turns (layer: engine; imports coord, store.turns, engine.turn,
engine.steps).

Every `ttl/3` seconds, each running turn's thread lease is extended on the coordinator and
every started turn's row is marked alive in ONE statement (not one task and one UPDATE per
turn). A beat that comes late, because the event loop was saturated, is not a loss by
itself: a lease that expired meanwhile is taken again under the same token when nobody
else took it. A turn is stopped as lost only when another holder has its lease, or when its
row is no longer running (another replica's reaper closed it, or a newer turn replaced it).
The reaper calls `beat()` before it sweeps, so a process never reaps its own live turns
after a stall.

The fence (agent.fence) a turn awaits before it acts: each `Lease` knows, on the monotonic
clock, until when nobody else can have taken it: the moment before the claim (or the last
beat that confirmed both the lease and the turn's row) was sent, plus the TTL, since both the
coordinator's expiry and the reaper's cutoff (the database's `now()` minus the TTL) count
from a moment after that. No wall clock is read, so a replica whose clock jumps keeps its
leases. While that time is more than a third of the TTL away, the fence costs a clock read;
nearer or past it (a paused or starved process), it asks the coordinator and the database
first (`confirm`: one lease call, one statement), and a turn that was taken raises TurnLost
before its step does anything. A pause that falls between the check and the side effect
itself is not covered: only a fencing token checked by the target could close that.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from uuid import UUID

from ator.coord.base import Coordinator
from ator.engine.steps import TurnLost
from ator.engine.turn import TurnHandle
from ator.errors import CoordinationError
from ator.obs.logging import get_logger
from ator.store import turns as turn_store
from ator.store.database import Database

__all__ = ["Heartbeats", "Lease", "LeaseFence"]

log = get_logger("ator.engine.liveness")
# Lease calls in flight at once per beat: a thousand turns must not take every connection of
# the coordinator's pool from the requests that need it too.
_LEASE_CALLS = 4


@dataclass(slots=True)
class Lease:
    """A thread lease as its pump knows it: nobody else can hold it, nor have reaped its
    turn, before the monotonic time `until` (see the module docstring)."""

    key: str
    token: str
    until: float

    @classmethod
    def claiming(cls, key: str, token: str, ttl: float) -> Lease:
        """Made just before the claim is sent: its expiry counts from a later moment."""
        return cls(key, token, time.monotonic() + ttl)

    def confirmed(self, sent: float, ttl: float) -> None:
        """Lease and row were both confirmed by calls sent at monotonic time `sent`."""
        self.until = max(self.until, sent + ttl)


@dataclass(frozen=True, slots=True)
class _Beating:
    lease: Lease
    handle: TurnHandle

    @property
    def key(self) -> str:
        return self.lease.key

    @property
    def token(self) -> str:
        return self.lease.token


class Heartbeats:
    def __init__(self, *, db: Database, coord: Coordinator, ttl: float) -> None:
        self.db = db
        self.coord = coord
        self.ttl = ttl
        self._turns: dict[str, _Beating] = {}
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._retaken: set[str] = set()

    def __len__(self) -> int:
        return len(self._turns)

    def add(self, lease: Lease, handle: TurnHandle) -> None:
        """Keep `handle`'s turn alive while it holds `lease`."""
        self._turns[lease.key] = _Beating(lease, handle)

    def fence(self, lease: Lease, handle: TurnHandle) -> LeaseFence:
        """The fence `handle`'s turn awaits before it acts (agent.fence)."""
        return LeaseFence(self, lease, handle)

    def discard(self, key: str) -> None:
        self._turns.pop(key, None)

    def turn_ids(self) -> list[UUID]:
        """The turns this process runs right now (a turn whose task ended is not one)."""
        return [b.handle.turn_id for b in self._turns.values()]

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ator-heartbeats")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        pending: set[asyncio.Task[None]] = set()
        try:
            while True:
                await asyncio.sleep(self.ttl / 3)
                # Each beat on its own task: the timer keeps its cadence while a row update
                # waits for the database.
                task = asyncio.create_task(self._beat_logged())
                pending.add(task)
                task.add_done_callback(pending.discard)
        finally:
            for task in pending:
                task.cancel()

    async def _beat_logged(self) -> None:
        try:
            await self.beat()
        except Exception:
            log.warning("heartbeat failed", exc_info=True)

    async def beat(self) -> None:
        """Extend every lease and mark every started turn alive; stop the turns that lost.

        The leases come first and do not wait for the database: a beat whose row update is
        still queued behind a busy pool must not let the next beat's leases lapse. Only one
        row update runs at a time; a beat that finds one running waits for it, then its own."""
        beating = list(self._turns.values())
        if not beating:
            return
        sent = time.monotonic()
        gate = asyncio.Semaphore(_LEASE_CALLS)
        outcomes = await asyncio.gather(*(self._keep(b, gate) for b in beating),
                                        return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        for outcome in failed:
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
        if failed:
            # The coordinator did not answer: whether someone else took a lease is unknown,
            # so keep the turns running and their rows alive (the row check below is the
            # truth a replacement turn would change).
            log.warning("heartbeat could not extend leases",
                        extra={"leases": len(failed)}, exc_info=failed[0])
        held = [o if isinstance(o, bool) else True for o in outcomes]
        confirmed = {b.key for b, o in zip(beating, outcomes, strict=True) if o is True}
        retaken = sum(1 for b in beating if b.key in self._retaken)
        self._retaken.clear()
        if retaken:
            log.warning("late heartbeats took their lapsed leases again (a saturated loop?)",
                        extra={"leases": retaken})
        for b, ok in zip(beating, held, strict=True):
            if not ok:
                b.handle.stop("lost")
        async with self._lock:
            started = {b.handle.turn_id: b.handle for b, ok in zip(beating, held, strict=True)
                       if ok and b.handle.started and b.handle.reason is None}
            if not started:
                return
            alive = await turn_store.heartbeat_many(self.db, list(started))
            for turn_id, handle in started.items():
                if turn_id not in alive and handle.reason is None:
                    handle.stop("lost")
            for b in beating:
                if b.key in confirmed and b.handle.turn_id in alive:
                    b.lease.confirmed(sent, self.ttl)

    async def confirm(self, lease: Lease, handle: TurnHandle) -> bool:
        """Ask the coordinator and the database whether `handle`'s turn still holds `lease`
        and its row still runs (refreshing both, as a beat would); False when it was taken.
        A coordinator that does not answer leaves the row to decide, as in a beat."""
        sent = time.monotonic()
        b = self._turns.get(lease.key)
        if b is None or b.handle is not handle:
            return False  # its pump no longer runs it here
        try:
            kept: bool | None = await self._keep(b, asyncio.Semaphore(1))
        except CoordinationError:
            log.warning("fence could not reach the coordinator", exc_info=True)
            kept = None
        if kept is False:
            return False
        if handle.turn_id not in await turn_store.heartbeat_many(self.db, [handle.turn_id]):
            return False
        if kept:
            lease.confirmed(sent, self.ttl)
        return True

    async def _keep(self, b: _Beating, gate: asyncio.Semaphore) -> bool:
        async with gate:
            if self._turns.get(b.key) is not b:
                return True  # ended since the beat began: its pump released the lease
            if await self.coord.extend(b.key, b.token, self.ttl):
                return True
            if self._turns.get(b.key) is not b:
                return True
            # Late, not lost: the lease lapsed while the loop could not run us. Take it
            # again unless someone else did; the row check then catches a replaced turn.
            if not await self.coord.acquire(b.key, b.token, self.ttl):
                return False
            current = self._turns.get(b.key)
            if current is None or current.token != b.token:
                # The turn ended while we took the lease again: give it back, or the thread
                # would look busy to every pump for a whole TTL.
                await self.coord.release(b.key, b.token)
                return True
            self._retaken.add(b.key)
            return True


class LeaseFence:
    """The fence of one turn on its thread's lease (see the module docstring)."""

    __slots__ = ("_beats", "_handle", "_lease", "_margin")

    def __init__(self, beats: Heartbeats, lease: Lease, handle: TurnHandle) -> None:
        self._beats = beats
        self._lease = lease
        self._handle = handle
        self._margin = beats.ttl / 3  # a beat's period: a live turn is never this near

    async def __call__(self) -> None:
        if time.monotonic() < self._lease.until - self._margin:
            return
        if not await self._beats.confirm(self._lease, self._handle):
            self._handle.lose()
            raise TurnLost("another replica took this turn over while this one was held "
                           "up past its lease; its step did not run")
