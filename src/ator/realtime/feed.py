"""One live feed per followed log per replica, shared by its sockets (layer: realtime;
imports realtime.logs, realtime.outbox, socketio/engineio packets).

A log is a thread's events or a workflow run's (realtime.logs: both have a dense per-key
`seq`); the same code replays and follows either, so a `run:` room is exactly a `thread:`
room over another log. A thousand sockets on one thread must not mean a thousand
subscriptions, JSON parses and encodes of every frame: a `Feed` reads the log once
(`Log.open`: live, with its own recovery from the database), encodes each frame once, and
puts it in the transport queue of each live member.

A socket joins with `after_seq` through a catch-up task: it sends the socket the frames
after its cursor from the database, never past the feed's position (`feed.seq`, the last
persisted seq the feed has broadcast), and becomes a member when it has reached it. The
check and the membership change happen with no await between them, and so do the feed's
"advance seq, snapshot members": a frame is either in the catch-up or in the feed, never
both, never neither.

Bounded memory per socket, by bytes (realtime.outbox): a member whose outbox holds
`outbox_bytes` is not sent more persisted frames; it is demoted to a catch-up from its own
seq, which waits for its outbox to drain (a socket that does not drain within
`slow_timeout` is disconnected and resumes with after_seq later; the gateway's sweep
disconnects any socket stalled that long). Token deltas are volatile: dropped for a member
whose outbox holds more than a little.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from typing import Any
from uuid import UUID

import engineio  # type: ignore[import-untyped]
import socketio  # type: ignore[import-untyped]

from ator import jsonenc
from ator.errors import AtorError, CoordinationError
from ator.obs.logging import get_logger
from ator.realtime.logs import Log
from ator.realtime.outbox import Outbox
from ator.store.scope import Scope

__all__ = ["Feeds", "Follow"]

log = get_logger("ator.realtime.feed")

VOLATILE_BACKLOG = 16  # queued packets past which a socket's token deltas are dropped
VOLATILE_BYTES = 64 * 1024  # ...or queued bytes
_PAGE = 200
_RECHECK = 5.0  # quiet seconds after which a feed re-reads the database (lost notices)
_RETRY = (0.2, 5.0)  # first and longest pause before a failed feed resumes


class Follow:
    """One socket following one log's key (a thread, a run): the last persisted seq sent."""

    def __init__(self, sid: str, eio_sid: str, scope: Scope, key: UUID, seq: int,
                 feeds: Feeds) -> None:
        self.sid, self.eio_sid, self.scope, self.key = sid, eio_sid, scope, key
        self.feeds = feeds
        self.seq = seq
        self.catching_up: asyncio.Task[None] | None = None
        self.dropped_deltas = 0


class Feed:
    def __init__(self, scope: Scope, key: UUID, seq: int) -> None:
        self.scope, self.key = scope, key
        self.seq = seq  # the last persisted seq broadcast (or committed before the feed)
        self.members: dict[str, Follow] = {}
        self.followers: dict[str, Follow] = {}  # members and those catching up
        self.task: asyncio.Task[None] | None = None


class Feeds:
    """The feeds of one gateway over one log, by key."""

    def __init__(self, sio: socketio.AsyncServer, log: Log, *,
                 outbox_bytes: int, slow_timeout: float,
                 disconnect: Callable[[str], None]) -> None:
        self.sio = sio
        self.log = log
        self.outbox_bytes, self.slow_timeout = outbox_bytes, slow_timeout
        self._disconnect = disconnect
        self._feeds: dict[UUID, Feed] = {}
        self._opening: dict[UUID, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def count(self) -> int:
        return len(self._feeds)

    def room(self, key: UUID) -> str:
        return f"{self.log.room}:{key}"

    async def follow(self, sid: str, scope: Scope, key: UUID, after_seq: int) -> Follow:
        """Start following: checks ownership (NotFound), then catches up in the background."""
        await self.log.check(scope, key)
        feed = await self._feed(scope, key)
        eio_sid = self.sio.manager.eio_sid_from_sid(sid, "/")
        follow = Follow(sid, eio_sid, scope, key, after_seq, self)
        feed.followers[sid] = follow
        follow.catching_up = asyncio.get_running_loop().create_task(self._catch_up(feed, follow))
        return follow

    async def unfollow(self, follow: Follow) -> None:
        feed = self._feeds.get(follow.key)
        task, follow.catching_up = follow.catching_up, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if feed is None:
            return
        feed.members.pop(follow.sid, None)
        if feed.followers.get(follow.sid) is follow:
            del feed.followers[follow.sid]
        if not feed.followers and self._feeds.get(feed.key) is feed:
            del self._feeds[feed.key]
            lock = self._opening.get(feed.key)
            if lock is not None and not lock.locked():
                del self._opening[feed.key]
            if feed.task is not None:
                feed.task.cancel()
                await asyncio.gather(feed.task, return_exceptions=True)

    async def _feed(self, scope: Scope, key: UUID) -> Feed:
        lock = self._opening.setdefault(key, asyncio.Lock())
        async with lock:
            feed = self._feeds.get(key)
            if feed is None:
                seq, frames = await self.log.open(scope, key, recheck=_RECHECK)
                feed = self._feeds[key] = Feed(Scope(scope.org_id), key, seq)
                feed.task = asyncio.get_running_loop().create_task(self._run(feed, frames))
        return feed

    async def _run(self, feed: Feed, frames: AsyncGenerator[dict[str, Any] | None, None]
                   ) -> None:
        """Broadcast the log's frames for as long as anyone follows it. A failure (the
        coordinator or the database) does not end the feed: it resumes from the last seq
        it sent, so its sockets miss nothing but the deltas of the gap."""
        pause = _RETRY[0]
        while True:
            try:
                async for frame in frames:
                    pause = _RETRY[0]
                    if frame is None:
                        continue
                    if frame["seq"] is not None:
                        feed.seq = frame["seq"]
                    self._broadcast(feed, frame)
                return
            except (AtorError, OSError, TimeoutError):
                log.warning("a %s feed failed; resuming from seq %d", self.log.room,
                            feed.seq, exc_info=True)
            finally:
                await frames.aclose()
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RETRY[1])
            frames = self.log.resume(feed.scope, feed.key, after_seq=feed.seq,
                                     recheck=_RECHECK)

    def _broadcast(self, feed: Feed, frame: dict[str, Any]) -> None:
        """Encode once, queue to every live member (no await: see the module)."""
        packet = self._packet(frame)
        persisted = frame["seq"] is not None
        for follow in list(feed.members.values()):
            queue = self._queue(follow)
            if queue is None:
                continue
            if not persisted and frame["type"] == "delta":
                if queue.qsize() >= VOLATILE_BACKLOG or queue.bytes >= VOLATILE_BYTES:
                    follow.dropped_deltas += 1
                    continue
            elif persisted and queue.bytes >= self.outbox_bytes:
                del feed.members[follow.sid]  # lagging: resume from its seq once drained
                follow.catching_up = asyncio.get_running_loop().create_task(
                    self._catch_up(feed, follow))
                continue
            queue.put_nowait(packet)
            if persisted:
                follow.seq = frame["seq"]

    async def _catch_up(self, feed: Feed, follow: Follow) -> None:
        try:
            while follow.seq < feed.seq:
                page = await self.log.read(follow.scope, follow.key, after_seq=follow.seq,
                                           limit=_PAGE)
                if not page:
                    raise CoordinationError("the feed is ahead of the database")
                for frame in page:
                    if frame["seq"] > feed.seq:
                        break  # the feed sends it once we are a member
                    queue = await self._drained(follow)
                    if queue is None:
                        return
                    queue.put_nowait(self._packet(frame))
                    follow.seq = frame["seq"]
            # Caught up: from here the feed sends the rest (no await since the check).
            follow.catching_up = None
            feed.members[follow.sid] = follow
        except (AtorError, OSError, TimeoutError) as exc:
            log.warning("a socket's catch-up failed", exc_info=True)
            problem = exc if isinstance(exc, AtorError) else CoordinationError(
                f"the {self.log.room} could not be read; join again")
            queue = self._queue(follow)
            if queue is not None:
                queue.put_nowait(self._packet(self.log.error(follow.key, problem.code,
                                                             problem.status, problem.message)))
            self._spawn_unfollow(follow)

    async def _drained(self, follow: Follow) -> Outbox | None:
        queue = self._queue(follow)
        if queue is not None and queue.bytes >= self.outbox_bytes:
            try:
                async with asyncio.timeout(self.slow_timeout):
                    await queue.join()
            except TimeoutError:
                log.info("disconnecting a socket that does not keep up")
                self._disconnect(follow.sid)
                return None
        return queue

    def _queue(self, follow: Follow) -> Outbox | None:
        sock = self.sio.eio.sockets.get(follow.eio_sid)
        if sock is None or sock.closed:
            return None
        queue: Outbox = sock.queue  # realtime.outbox.Server makes every queue an Outbox
        return queue

    @staticmethod
    def _packet(frame: dict[str, Any]) -> Any:
        """The socket.io EVENT packet `frame` on namespace "/" (frames hold no binary, so the
        encoding is the text one; socket.io's Packet would scan the data for binary)."""
        encoded = f"{socketio.packet.EVENT}" + jsonenc.dumps(["frame", frame])
        return engineio.packet.Packet(engineio.packet.MESSAGE, encoded)

    def _spawn_unfollow(self, follow: Follow) -> None:
        task = asyncio.get_running_loop().create_task(self.unfollow(follow))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

