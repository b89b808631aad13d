"""The thread actor: one lease per thread, a durable mailbox, one turn at a time (layer:
engine; imports coord, store, engine.turn).

    submit ─► mailbox INSERT (unique per client id) ─► mark "more work" ─► wake
    wake   ─► admission (at most `max_in_flight` pumps; the rest queue by id, in order)
           ─► (one local pump per thread) claim: take the lease and the mark, one step
           ─► run a turn ─► release unless marked again (one step; marked: run another)
           ─► slot to the next thread
    post   ─► (no pump here, a free slot) claim ─► the INSERT *is* the turn's start
              statement (`store.turns.post_turn`; a burst's starts share one,
              engine.starts) ─► run it ─► … as a pump; lease held elsewhere (busy) or
              nothing inserted (a resend): submit as above

A post to an idle thread is one statement where a submit and a wake are two commits: it
keeps the mailbox's guarantees because the insert is the same unique-per-client-id insert
(a resend inserts nothing and runs nothing), it commits with the turn that takes it (no
moment where it is accepted but not taken, so a crash loses nothing), and what arrives while
the lease is held still goes the submit way and becomes the next turn.

The mark closes the race between "drained nothing" and "released": a message that arrives
in between finds the lease taken, but its mark is taken by the pump's atomic "release unless
marked", which then runs again. A local wake that finds this thread's pump still running
makes it look once more when it ends. If the replica that took a message dies before running
it, the reaper's sweep wakes the thread.

Stop travels over the coordinator (`ator:abort`), so it reaches whichever replica owns the
turn, and keeps its typed reason (`cancelled:user`, `cancelled:shutdown`, …). The listener
resubscribes after a coordinator failure, with backoff; while it is down `listening` is
False and the replica reports itself not ready. Running turns are kept alive by one
process-wide heartbeat (engine.liveness), which also decides when a turn is really lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from uuid import UUID

from ator import jsonenc
from ator.coord.base import Coordinator
from ator.coord.listen import listen_forever
from ator.engine.admission import Admission
from ator.engine.liveness import Heartbeats, Lease
from ator.engine.turn import Posting, TurnHandle, TurnRunner
from ator.engine.wire import ABORT_CHANNEL
from ator.obs.logging import get_logger
from ator.store.database import Database
from ator.store.mailbox import Post
from ator.store.records import MailboxItem
from ator.store.scope import Scope

__all__ = ["Actor", "Wakes", "lease_key"]

log = get_logger("ator.engine.actor")


def lease_key(thread_id: UUID) -> str:
    return f"lease:thread:{thread_id}"


def _mark_key(thread_id: UUID) -> str:
    return f"more:thread:{thread_id}"


class Wakes:
    """Waking a thread and stopping its turn, for what is built before the actor (the
    extensions, `agent.extension.Waker`): the mark and the stop travel over the coordinator;
    the local wake is the actor's, which serves it once made (`Actor(wakes=…)`)."""

    def __init__(self, coord: Coordinator, lease_ttl: float) -> None:
        self.coord = coord
        self.lease_ttl = lease_ttl
        self._local: Callable[[Scope, UUID], None] | None = None

        self._post: Callable[[Scope, UUID, Post], Awaitable[MailboxItem | None]] | None = None

    def serve(self, local: Callable[[Scope, UUID], None],
              post: Callable[[Scope, UUID, Post], Awaitable[MailboxItem | None]] | None = None,
              ) -> None:
        self._local = local
        self._post = post

    async def post(self, scope: Scope, thread_id: UUID, post: Post) -> MailboxItem | None:
        """Start the idle thread's turn with `post` in one statement (`Actor.post`): the
        item, or None when it was not taken that way (submit it then)."""
        if self._post is None:
            return None
        return await self._post(scope, thread_id, post)

    async def notify(self, scope: Scope, thread_id: UUID) -> None:
        """A new item is in the mailbox: make sure some replica runs the thread."""
        await self.coord.mark(_mark_key(thread_id), self.lease_ttl * 4)
        if self._local is not None:
            self._local(scope, thread_id)

    async def stop(self, thread_id: UUID, reason: str = "user") -> None:
        """Abort the thread's running turn wherever it runs."""
        payload = jsonenc.dumps({"thread_id": str(thread_id), "reason": reason})
        await self.coord.publish(ABORT_CHANNEL, payload)


class Actor:
    def __init__(
        self, *, db: Database, coord: Coordinator, runner: TurnRunner, owner: str,
        lease_ttl: float, max_in_flight: int = 1000, wakes: Wakes | None = None,
    ) -> None:
        self.wakes = wakes or Wakes(coord, lease_ttl)
        self.wakes.serve(self.wake, self.post)
        self.db = db
        self.coord = coord
        self.runner = runner
        self.owner = owner
        self.lease_ttl = lease_ttl
        self.admission = Admission(max_in_flight)
        self.heartbeats = Heartbeats(db=db, coord=coord, ttl=lease_ttl)
        self._pumps: dict[UUID, asyncio.Task[None]] = {}
        self._rewake: dict[UUID, Scope] = {}  # woken while its pump was running
        self._running: dict[UUID, TurnHandle] = {}
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._deaf = asyncio.Event()  # set while the listener is down
        self._deaf.set()
        self._closing = False

    @property
    def listening(self) -> bool:
        """Whether stop requests from other replicas reach this one right now."""
        return self._listening.is_set()

    async def wait_listening(self, listening: bool = True) -> None:
        """Wait until the stop listener is up (or, with False, down)."""
        await (self._listening if listening else self._deaf).wait()

    def _set_listening(self, listening: bool) -> None:
        (self._listening if listening else self._deaf).set()
        (self._deaf if listening else self._listening).clear()

    async def start(self) -> None:
        self._listener = asyncio.create_task(
            listen_forever(self.coord, ABORT_CHANNEL, self._on_abort, self._set_listening),
            name="ator-abort-listener")
        self.heartbeats.start()
        await self._listening.wait()

    async def close(self) -> None:
        """Stop accepting work; running turns end as `cancelled:shutdown`, persisted. Never
        raises for a pump that failed: shutdown must reach everything after it."""
        self._closing = True
        self.admission.clear()  # their items stay pending; a sweep wakes them after restart
        for handle in list(self._running.values()):
            handle.stop("shutdown")
        pumps = list(self._pumps.values())
        if pumps:
            for result in await asyncio.gather(*pumps, return_exceptions=True):
                if isinstance(result, Exception):
                    log.warning("a thread pump failed during shutdown", exc_info=result)
        await self.heartbeats.close()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener

    @property
    def running(self) -> dict[UUID, TurnHandle]:
        return self._running

    async def notify(self, scope: Scope, thread_id: UUID) -> None:
        """A new item is in the mailbox: make sure some replica runs the thread."""
        await self.wakes.notify(scope, thread_id)

    async def post(self, scope: Scope, thread_id: UUID, post: Post) -> MailboxItem | None:
        """Take `post` for an idle thread here, its insert being the start of the turn that
        takes it: the item once that statement committed. None when not taken that way —
        this replica is closing, runs the thread's pump already, has no free slot, another
        replica holds the lease, or the insert did nothing (a resend): then submit it.
        Raises what the start statement raised (NotFound for another org's thread)."""
        if self._closing or thread_id in self._pumps or not self.admission.take():
            return None
        posting = Posting(post)
        self._start_pump(scope, thread_id, False, posting)
        return await posting.result

    def wake(self, scope: Scope, thread_id: UUID, *, force: bool = False) -> None:
        """Run the thread here if no local pump does. `force` runs one drain even without a
        mark (the reaper's sweep of items nobody picked up)."""
        if self._closing:
            return
        if thread_id in self._pumps:
            # That pump may already be past its last look at the mark (ending): it looks
            # again once it has ended, instead of leaving the item to the reaper's sweep.
            self._rewake[thread_id] = scope
            return
        if self.admission.enter(scope, thread_id, force=force):
            self._start_pump(scope, thread_id, force)

    def _start_pump(self, scope: Scope, thread_id: UUID, force: bool,
                    posting: Posting | None = None) -> None:
        task = asyncio.create_task(
            self._pump(scope, thread_id, force, posting), name=f"ator-pump-{thread_id}"
        )
        self._pumps[thread_id] = task
        task.add_done_callback(lambda _t: self._pump_ended(thread_id))

    def _pump_ended(self, thread_id: UUID) -> None:
        self._pumps.pop(thread_id, None)
        again = self._rewake.pop(thread_id, None)
        if again is not None and not self._closing:
            # Its slot goes straight to the same thread (a claim that finds no mark is one
            # round trip), ahead of the queue: that wake came while it held the slot.
            self._start_pump(again, thread_id, False)
            return
        while (admitted := self.admission.leave()) is not None:
            if not self._closing and admitted.thread_id not in self._pumps:
                self._start_pump(admitted.scope, admitted.thread_id, admitted.force)
                return

    async def stop(self, thread_id: UUID, reason: str = "user") -> None:
        """Abort the thread's running turn wherever it runs."""
        await self.wakes.stop(thread_id, reason)

    def _on_abort(self, message: str) -> None:
        try:
            data = jsonenc.loads(message)
            handle = self._running.get(UUID(data["thread_id"]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed abort message", extra={"raw": message[:200]})
            return
        if handle is not None:
            handle.stop(str(data.get("reason", "user")))

    async def _pump(self, scope: Scope, thread_id: UUID, force: bool,
                    posting: Posting | None = None) -> None:
        token = f"{self.owner}:{uuid.uuid4().hex[:12]}"
        key = lease_key(thread_id)
        mark = _mark_key(thread_id)
        lease = Lease.claiming(key, token, self.lease_ttl)
        try:
            # Every submit sets the mark after its INSERT committed, so "no mark" means
            # nothing arrived since the last drain: no empty drain needed. Two round trips
            # per turn: the claim (lease + mark) and the release unless marked again.
            acquired, more = await self.coord.claim(key, token, self.lease_ttl, mark)
            if not acquired:
                return  # another pump owns it; the mark makes that pump look again
            held = True
            try:
                more = more or force
                while not self._closing:
                    if more or posting is not None:
                        await self._one_turn(scope, thread_id, lease, posting)
                        posting = None
                    # A submit that found the lease taken left its mark: it is seen here,
                    # atomically with the release, so it is never left with nobody to run it.
                    more = await self.coord.release_unless_marked(key, token, mark)
                    if not more:
                        held = False
                        return
            finally:
                if held:
                    await self.coord.release(key, token)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if posting is not None and not posting.result.done():
                posting.fail(exc)  # the poster hears it (before its statement committed)
                return
            # Postgres or the coordinator failed; the items stay pending and the reaper's
            # sweep wakes the thread again.
            log.exception("thread pump failed")
        finally:
            if posting is not None:
                posting.taken(None)  # not taken here (busy elsewhere, closing): submit it

    async def _one_turn(self, scope: Scope, thread_id: UUID, lease: Lease,
                        posting: Posting | None = None) -> bool:
        def on_start(handle: TurnHandle) -> None:
            # Until the turn's row exists (its first statement may wait under load) the
            # heartbeat only extends the lease: a missing row then means "not yet".
            self._running[thread_id] = handle
            handle.fence = self.heartbeats.fence(lease, handle)
            self.heartbeats.add(lease, handle)

        try:
            return await self.runner.run(scope, thread_id, on_start, posting)
        finally:
            self._running.pop(thread_id, None)
            self.heartbeats.discard(lease.key)
