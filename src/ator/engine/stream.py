"""A thread's frames from a cursor on: what it missed from the database, then live (layer:
engine; imports coord, store.events, store.threads, engine.publish, engine.wire).

Every reader of a thread follows it through one `ThreadFollow` (the SSE endpoint and the
socket gateway through `thread_frames`/`open_feed`, the long-poll and `Ator.ask` directly),
so all see the same frames with the same guarantee: every persisted event after the cursor exactly
once and in `seq` order, with token deltas interleaved while live. A frame is

    {"v": 1, "seq": int | None, "type": str, "data": {...}}

(the one frame format of engine.wire): a persisted event has its `seq`; a batch of token
deltas has `seq` None and `type` "delta" (volatile: a reader may drop it, the persisted reply
is the truth).

How there is no gap and no duplicate at the seam: both channels are subscribed BEFORE the
database is read (a commit in between is in the read or in the inbox, maybe both); each
persisted event is yielded only when its seq is the cursor + 1 (seqs are dense per thread);
a notice that starts past that, or an inbox that dropped notices, sends the reader back to
the database from its cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import Any, Self
from uuid import UUID

from ator import jsonenc
from ator.coord.base import Coordinator
from ator.coord.fanout import Waiter
from ator.engine.publish import want_deltas
from ator.engine.wire import delta_channel, delta_frame, event_frame, thread_channel
from ator.store import events as event_store
from ator.store import threads as thread_store
from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["LogFollow", "ThreadFollow", "follow_frames", "open_feed", "read_frames", "resume_feed",
           "thread_frames", "wait_frames"]

_PAGE = 500
_INBOX = 64  # notices a reader may fall behind by before it re-reads the database


async def thread_frames(
    db: Database, coord: Coordinator, scope: Scope, thread_id: UUID, *, after_seq: int = 0,
    deltas: bool = True, keepalive: float | None = None,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """Frames of `thread_id` after `after_seq`, replayed then live, until the caller stops.

    Checks ownership first, so awaiting this raises NotFound for another org's thread before
    anything is streamed. After `keepalive` idle seconds the iterator re-reads the database
    (a lost notice costs at most that long) and yields None (a caller's cue to send a
    heartbeat); it raises CoordinationError when the coordinator's shared connection is
    lost."""
    await thread_store.get_thread(db, scope, thread_id)
    return _frames(db, coord, scope, thread_id, after_seq, deltas, keepalive)


async def open_feed(
    db: Database, coord: Coordinator, scope: Scope, thread_id: UUID, *, recheck: float,
) -> tuple[int, AsyncGenerator[dict[str, Any] | None, None]]:
    """A thread's frames from now on: (the seq committed before it, its live iterator, which
    re-reads the database after `recheck` quiet seconds) — what a process shares among all
    the readers of one thread (the socket gateway). Raises NotFound for another org's
    thread."""
    thread = await thread_store.get_thread(db, scope, thread_id)
    return thread.last_seq, _frames(db, coord, scope, thread_id, thread.last_seq, True,
                                    recheck)


def resume_feed(
    db: Database, coord: Coordinator, scope: Scope, thread_id: UUID, *, after_seq: int,
    recheck: float,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """A feed's frames again after it failed, from the last seq it sent."""
    return _frames(db, coord, scope, thread_id, after_seq, True, recheck)


async def read_frames(
    db: Database, scope: Scope, thread_id: UUID, *, after_seq: int, limit: int = _PAGE,
    check: bool = False,
) -> list[dict[str, Any]]:
    """Frames of the events after `after_seq` from the database (the first `limit`). With
    `check`, raises NotFound for another org's thread first."""
    if check:
        await thread_store.get_thread(db, scope, thread_id)
    page = await event_store.read_events(db, scope, thread_id, after_seq=after_seq,
                                         limit=limit)
    return [event_frame(thread_id, e) for e in page]


async def _frames(
    db: Database, coord: Coordinator, scope: Scope, thread_id: UUID, after_seq: int,
    deltas: bool, keepalive: float | None,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    async with contextlib.AsyncExitStack() as stack:
        reader = await stack.enter_async_context(
            ThreadFollow(db, coord, scope, thread_id, after_seq=after_seq))
        tokens = (await stack.enter_async_context(
            coord.hub.subscribe(delta_channel(thread_id), inbox=_INBOX)) if deltas else None)
        if tokens is not None:
            await want_deltas(coord, thread_id)
        for frame in await reader.catch_up():
            yield frame
        async for item in _merged(reader.notices, tokens, keepalive):
            if item is None:
                # Quiet for `keepalive` s: a notice may have been lost (pub/sub is at most
                # once), so the database is asked too.
                for frame in await reader.catch_up():
                    yield frame
                yield None
                continue
            channel, message = item
            if channel == "deltas":
                yield delta_frame(thread_id, jsonenc.loads(message))
                continue
            for frame in await reader.take(message):
                yield frame


class LogFollow:
    """The one way to follow an append-only log with a dense per-log `seq` (a thread's
    events, a workflow run's): its notices subscribed, a cursor, and the database reads
    that move the cursor. Subclasses say which channel and how a page is read.

    Enter it BEFORE reading or acting (a commit after that is in the notices). With a known
    `after_seq`, every frame after it comes exactly once and in seq order: a notice that
    starts past the cursor, notices lost to a full inbox, or a notice that only says "look"
    (`{"wake": …}`, no frames) send it back to the database. With `after_seq=None` (a caller
    that subscribes and then submits, so everything after is in the notices), frames are
    taken as notices bring them until the caller `rewind`s to a seq it learned (the cursor
    is known from the first notice on)."""

    def __init__(self, db: Database, coord: Coordinator, scope: Scope, channel: str, *,
                 after_seq: int | None, inbox: int = _INBOX) -> None:
        self.db, self.coord, self.scope, self.channel = db, coord, scope, channel
        self.seq = after_seq
        self._inbox = inbox
        self._dropped = 0
        self._stack = contextlib.AsyncExitStack()
        self._notices: Waiter | None = None

    async def read_page(self, after_seq: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        """(how many records the page had, their frames) after `after_seq`."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        self._notices = await self._stack.enter_async_context(
            self.coord.hub.subscribe(self.channel, inbox=self._inbox))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    @property
    def notices(self) -> Waiter:
        assert self._notices is not None, "enter the follow first"
        return self._notices

    @property
    def lost(self) -> bool:
        """Whether notices were dropped since the cursor last moved on the database."""
        return self.notices.dropped != self._dropped

    def rewind(self, seq: int) -> None:
        """Move the cursor to `seq` (the next `catch_up` reads from there)."""
        self.seq = seq

    async def next(self, timeout: float | None) -> list[dict[str, Any]] | None:
        """The frames of the next notice ([] when it brought nothing new); None when none
        came within `timeout` seconds. Raises CoordinationError when the hub is lost."""
        message = await self.notices.get(timeout)
        return None if message is None else await self.take(message)

    async def catch_up(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The frames after the cursor from the database (the first `limit`, else all)."""
        out: list[dict[str, Any]] = []
        if self.seq is None:
            return out
        self._dropped = self.notices.dropped
        while limit is None or len(out) < limit:
            want = _PAGE if limit is None else min(_PAGE, limit - len(out))
            n, page = await self.read_page(self.seq, want)
            out.extend(self._take(page))
            if n < want:
                break
        return out

    async def take(self, message: str) -> list[dict[str, Any]]:
        """The new frames of one notice, in order."""
        notice = jsonenc.loads(message)
        if "wake" in notice and self.seq is not None:
            return await self.catch_up()
        frames = notice.get("frames", [])
        if self.seq is None:
            if frames:
                self.seq = int(frames[-1]["seq"])
            return list(frames)
        frames = [f for f in frames if int(f["seq"]) > self.seq]
        if self.lost or (frames and int(frames[0]["seq"]) != self.seq + 1):
            return await self.catch_up()  # notices were lost, or one came past a gap
        return self._take(frames)

    def _take(self, frames: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for frame in frames:
            if self.seq is not None and int(frame["seq"]) == self.seq + 1:
                self.seq += 1
                out.append(frame)
        return out


class ThreadFollow(LogFollow):
    """A thread's committed frames. SSE and sockets (`thread_frames`, `open_feed`), the
    long-poll (`Ator.wait_events`) and `Ator.ask` all read through it."""

    def __init__(self, db: Database, coord: Coordinator, scope: Scope, thread_id: UUID, *,
                 after_seq: int | None, inbox: int = _INBOX) -> None:
        super().__init__(db, coord, scope, thread_channel(thread_id), after_seq=after_seq,
                         inbox=inbox)
        self.thread_id = thread_id

    async def read_page(self, after_seq: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        page = await event_store.read_events(self.db, self.scope, self.thread_id,
                                             after_seq=after_seq, limit=limit)
        return len(page), [event_frame(self.thread_id, e) for e in page]


async def wait_frames(follow: LogFollow, *, timeout: float, limit: int
                      ) -> list[dict[str, Any]]:
    """Long-poll on an entered follow: what is after its cursor now, else the frames of the
    next commit within `timeout` seconds ([] on timeout)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    found = await follow.catch_up(limit)
    while not found and (left := deadline - loop.time()) > 0:
        frames = await follow.next(left)
        if frames is None:
            break
        found = frames
    return found[:limit]


async def follow_frames(follow: LogFollow, keepalive: float | None
                        ) -> AsyncGenerator[dict[str, Any] | None, None]:
    """An entered follow's frames, replayed then live, with None after `keepalive` quiet
    seconds (having re-read the database: a lost notice costs at most that long)."""
    for frame in await follow.catch_up():
        yield frame
    async for item in _merged(follow.notices, None, keepalive):
        if item is None:
            for frame in await follow.catch_up():
                yield frame
            yield None
            continue
        for frame in await follow.take(item[1]):
            yield frame


async def _merged(notices: Waiter, tokens: Waiter | None, keepalive: float | None
                  ) -> AsyncIterator[tuple[str, str] | None]:
    """Messages of both waiters as ("notices" | "deltas", message); None when idle for
    `keepalive` seconds. When both have one ready, deltas go first: the publisher sends a
    step's deltas before announcing its record."""
    pending: dict[asyncio.Task[str | None], str] = {}

    def arm(waiter: Waiter, name: str) -> None:
        pending[asyncio.ensure_future(waiter.get())] = name

    arm(notices, "notices")
    if tokens is not None:
        arm(tokens, "deltas")
    try:
        while True:
            done, _ = await asyncio.wait(pending, timeout=keepalive,
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                yield None
                continue
            for task in sorted(done, key=lambda t: pending[t] != "deltas"):
                name = pending.pop(task)
                message = task.result()  # raises CoordinationError when the hub is lost
                arm(tokens if name == "deltas" and tokens is not None else notices, name)
                if message is not None:
                    yield name, message
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
