"""Publishing what a turn produced to every replica (layer: engine; imports coord,
engine.wire, jsonenc, providers.base, store.records).

Committed events are announced on the thread's channel right after their commit (persist,
then emit). Token deltas are the one ephemeral exception: coalesced per thread and
published on the thread's delta channel, so a listener on any replica (the CLI, a socket)
sees them live; a delta lost on the way is not recovered, the persisted reply is the truth.
Coalescing bounds the rate, not the delay: a delta that finds no batch published for the
thread in the last `_COALESCE` seconds goes at once (with whatever the same moment of the
loop adds to it), otherwise it waits for the rest of that window, so a thread publishes at
most one batch per window and a slow stream's tokens are not held back by it.

Most turns have nobody watching their tokens. When a batch of a turn's deltas reached no
subscriber anywhere (the coordinator counts them), the turn's further deltas are dropped
before they are even encoded, until someone announces interest in the thread on
`DELTAS_WANTED_CHANNEL` (`want_deltas`, called by every delta listener once subscribed) or
the turn ends. A listener that arrives mid-turn so misses only the deltas of the moment
between its subscription and its announcement reaching this replica.

`watch(fn)` lets a transport on this replica see each announced batch (the socket gateway
pushes turn started/ended to org rooms from it); a watcher runs synchronously and must only
schedule work, and its failure is logged, never the turn's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from ator import jsonenc
from ator.coord.base import Coordinator
from ator.coord.listen import listen_forever
from ator.engine.wire import (
    DELTAS_WANTED_CHANNEL,
    delta,
    delta_channel,
    notice,
    thread_channel,
)
from ator.obs.logging import get_logger
from ator.providers.base import StreamEvent, TextDelta, ThinkingDelta
from ator.store.records import Event
from ator.store.scope import Scope

__all__ = ["Publisher", "Watcher", "want_deltas"]

Watcher = Callable[[Scope, UUID, Sequence[Event]], None]

log = get_logger("ator.engine.publish")
_COALESCE = 0.03  # seconds: at most one published batch of deltas per thread per window
_RECENT_MAX = 4096  # threads remembered as recently published before the stale are dropped


async def want_deltas(coord: Coordinator, thread_id: UUID) -> None:
    """Tell every replica that a listener now follows the thread's deltas (call once the
    subscription is live)."""
    await coord.publish(DELTAS_WANTED_CHANNEL, str(thread_id))


class Publisher:
    def __init__(self, coord: Coordinator) -> None:
        self.coord = coord
        self._pending: dict[UUID, list[dict[str, Any]]] = {}
        self._published: dict[UUID, float] = {}  # thread -> loop time of its last batch
        self._tasks: set[asyncio.Task[None]] = set()
        self._watchers: list[Watcher] = []
        self._unwatched: dict[UUID, str] = {}  # thread -> its turn whose deltas reach nobody
        self._interest: asyncio.Task[None] | None = None
        self._hearing = asyncio.Event()  # announcements of interest reach this replica
        self._announcements = 0  # how many arrived (one may overtake a publish's reply)

    async def start(self) -> None:
        """Follow announcements of interest in deltas (see the module); returns once that
        subscription is live."""
        if self._interest is None:
            self._interest = asyncio.get_running_loop().create_task(
                listen_forever(self.coord, DELTAS_WANTED_CHANNEL, self._wanted, self._heard),
                name="ator-deltas-wanted")
        await self._hearing.wait()

    def _heard(self, live: bool) -> None:
        if live:
            self._hearing.set()
        else:  # announcements may be missed meanwhile: publish every turn's deltas again
            self._hearing.clear()
            self._unwatched.clear()

    def _wanted(self, message: str) -> None:
        self._announcements += 1
        try:
            self._unwatched.pop(UUID(message), None)
        except ValueError:
            log.warning("ignoring a malformed deltas-wanted message", extra={"raw": message[:80]})

    def watch(self, fn: Watcher) -> Callable[[], None]:
        """Call `fn(scope, thread_id, events)` after each announcement; returns unwatch."""
        self._watchers.append(fn)
        return lambda: self._watchers.remove(fn)

    async def events(self, scope: Scope, thread_id: UUID, events: Sequence[Event]) -> None:
        """Announce committed events (call only after their commit). Deltas still queued for
        the thread go first, so a listener never sees a step's deltas after its record."""
        await self._flush(thread_id)
        if any(e.kind == "turn_ended" for e in events):
            self._unwatched.pop(thread_id, None)
            self._published.pop(thread_id, None)
        if events:
            await self.coord.publish(thread_channel(thread_id),
                                     notice(scope.org_id, thread_id, events))
            for fn in list(self._watchers):
                try:
                    fn(scope, thread_id, events)
                except Exception:  # a transport's bug must not fail the turn that published
                    log.exception("a publish watcher failed")

    def delta(self, thread_id: UUID, turn_id: UUID, event: StreamEvent) -> None:
        """Queue one streamed event; flushed as one batch per thread every few ms."""
        if self._unwatched.get(thread_id) == str(turn_id):
            return  # nobody listens (see the module)
        frames = self._pending.get(thread_id)
        if frames is None:
            frames = self._pending[thread_id] = []
            loop = asyncio.get_running_loop()
            last = self._published.get(thread_id)
            wait = 0.0 if last is None else max(0.0, last + _COALESCE - loop.time())
            task = loop.create_task(self._flush_later(thread_id, wait))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if isinstance(event, TextDelta | ThinkingDelta) and _mergeable(event, frames, turn_id):
            frames[-1]["text"] += event.text  # coalesce consecutive text
            return
        frames.append(delta(turn_id, event))

    async def _flush_later(self, thread_id: UUID, wait: float) -> None:
        await asyncio.sleep(wait)  # 0 still yields once: the same moment's deltas join
        await self._flush(thread_id)

    async def _flush(self, thread_id: UUID) -> None:
        frames = self._pending.pop(thread_id, None)
        if not frames:
            return
        self._remember(thread_id)
        announced = self._announcements
        try:
            heard = await self.coord.publish(
                delta_channel(thread_id), jsonenc.dumps(frames))
        except Exception:  # ephemeral by contract: a lost delta batch is only logged
            log.warning("could not publish token deltas", exc_info=True)
            return
        # Go quiet only while announcements can reach us, and not when one arrived while
        # this publish was on its way (it may be for this thread, and is not seen again).
        if not heard and self._hearing.is_set() and self._announcements == announced:
            self._unwatched[thread_id] = frames[-1]["turn_id"]

    def _remember(self, thread_id: UUID) -> None:
        """Note that the thread published a batch now. Entries leave at the turn's end; the
        few a turn that never ended leaves behind are dropped once stale (amortized)."""
        now = asyncio.get_running_loop().time()
        if len(self._published) >= _RECENT_MAX and thread_id not in self._published:
            self._published = {t: at for t, at in self._published.items()
                               if now - at < _COALESCE}
        self._published[thread_id] = now

    async def aclose(self) -> None:
        """Send what is queued, then stop."""
        tasks = list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._interest is not None:
            self._interest.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._interest
            self._interest = None


def _mergeable(event: TextDelta | ThinkingDelta, frames: list[dict[str, Any]],
               turn_id: UUID) -> bool:
    if isinstance(event, ThinkingDelta) and event.signature is not None:
        return False
    return bool(frames) and frames[-1]["type"] == type(event).__name__ \
        and frames[-1]["turn_id"] == str(turn_id)
