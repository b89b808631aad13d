"""The process's shared subscription: one pub/sub connection, fanned out in-process (layer:
coord; imports stdlib, ator.errors and coord.base).

Long-polls and other waiters that tenants can multiply must not each hold a connection to
the coordinator: a hundred viewers waiting on events would exhaust the Redis pool and starve
leases, stops and readiness for every org. So a `Hub` keeps ONE `Listener` (one connection)
and reference-counts channels on it: the first waiter on a channel subscribes it, the last
one to leave unsubscribes it, and every message is copied into each waiter's bounded inbox.

    async with coord.hub.subscribe(thread_channel(thread_id)) as waiter:
        ...                                  # live: nothing published from here is missed
        message = await waiter.get(timeout)  # None on timeout

A waiter that does not keep up loses the newest messages, never blocks the others; it can
tell from `waiter.dropped` and should then re-read the truth (Postgres). If the connection
is lost for good, every current waiter's `get` raises CoordinationError and the next
`subscribe` opens a new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from ator.coord.base import Deliver, Listener, Lost
from ator.errors import CoordinationError

__all__ = ["DEFAULT_INBOX", "Hub", "Waiter"]

DEFAULT_INBOX = 256  # messages a waiter may fall behind by before it loses the newest

OpenListener = Callable[[Deliver, Lost], Awaitable[Listener]]


class Waiter:
    """One subscriber's bounded inbox on one channel (made by `Hub.subscribe`)."""

    def __init__(self, channel: str, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.channel = channel
        self.dropped = 0  # messages lost because the inbox was full
        self._maxsize = maxsize
        self._items: deque[str] = deque()
        self._ready = asyncio.Event()
        self._error: BaseException | None = None

    def _deliver(self, message: str) -> None:
        if len(self._items) >= self._maxsize:
            self.dropped += 1
            return
        self._items.append(message)
        self._ready.set()

    def _fail(self, error: BaseException) -> None:
        self._error = error
        self._ready.set()

    async def get(self, timeout: float | None = None) -> str | None:
        """The next message, waiting up to `timeout` seconds (None: no limit); None when
        the time ran out. Raises CoordinationError when the shared connection was lost."""
        if not self._items and self._error is None:
            self._ready.clear()
            try:
                async with asyncio.timeout(timeout):
                    await self._ready.wait()
            except TimeoutError:
                return None
        if self._items:
            return self._items.popleft()
        assert self._error is not None
        raise self._error

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            message = await self.get()
            if message is not None:
                yield message


class _Channel:
    """Waiters of one channel, and whether the listener is subscribed to it. The lock
    orders subscribe and unsubscribe of this channel, so the connection's state always
    ends up matching whether anyone waits."""

    def __init__(self) -> None:
        self.waiters: set[Waiter] = set()
        self.users = 0  # waiters plus leavers still unsubscribing: the entry lives while > 0
        self.subscribed_on: Listener | None = None
        self.lock = asyncio.Lock()


class Hub:
    """Reference-counted channels over one listener connection, opened on first use."""

    def __init__(self, open_listener: OpenListener, *, inbox: int = DEFAULT_INBOX) -> None:
        self._open_listener = open_listener
        self._inbox = inbox
        self._listener: Listener | None = None
        self._opening = asyncio.Lock()
        self._channels: dict[str, _Channel] = {}
        self._closed = False

    @property
    def channels(self) -> int:
        """Channels with at least one waiter or one unsubscribe in flight."""
        return len(self._channels)

    @property
    def waiters(self) -> int:
        return sum(len(entry.waiters) for entry in self._channels.values())

    @asynccontextmanager
    async def subscribe(self, channel: str, *, inbox: int | None = None
                        ) -> AsyncIterator[Waiter]:
        """Wait on `channel`; live once entered (the subscription is confirmed).

        Raises CoordinationError if the coordinator cannot subscribe. Cancelling the body
        still unsubscribes the channel when this was its last waiter."""
        if self._closed:
            raise CoordinationError("the coordinator is closed")
        waiter = Waiter(channel, inbox or self._inbox)
        entry = self._channels.get(channel)
        if entry is None:
            entry = self._channels[channel] = _Channel()
        entry.users += 1
        entry.waiters.add(waiter)
        try:
            async with entry.lock:
                if self._listener is None or entry.subscribed_on is not self._listener:
                    listener = await self._ensure_listener()
                    try:
                        await listener.add(channel)
                    except BaseException:
                        # Cancelled or failed after the SUBSCRIBE may have been sent: undo
                        # it (a waiter queued behind us subscribes again).
                        await asyncio.shield(self._undo(listener, channel))
                        raise
                    entry.subscribed_on = listener
            yield waiter
        finally:
            entry.waiters.discard(waiter)
            # Shielded: a waiter cancelled while leaving must not leave the channel
            # subscribed on the connection with nobody to read it.
            await asyncio.shield(self._leave(channel, entry))

    async def _leave(self, channel: str, entry: _Channel) -> None:
        try:
            if not entry.waiters:
                async with entry.lock:
                    listener = entry.subscribed_on
                    if not entry.waiters and listener is not None:
                        entry.subscribed_on = None
                        if listener is self._listener:  # a lost one has nothing to undo
                            await listener.remove(channel)
        except CoordinationError:
            pass  # the connection is failing; _lost (or close) resets it
        finally:
            entry.users -= 1
            if entry.users == 0 and self._channels.get(channel) is entry:
                del self._channels[channel]

    @staticmethod
    async def _undo(listener: Listener, channel: str) -> None:
        with contextlib.suppress(CoordinationError):  # a failing connection is reset anyway
            await listener.remove(channel)

    async def _ensure_listener(self) -> Listener:
        async with self._opening:
            if self._closed:
                raise CoordinationError("the coordinator is closed")
            if self._listener is None:
                self._listener = await self._open_listener(self._deliver, self._lost)
            return self._listener

    def _deliver(self, channel: str, message: str) -> None:
        entry = self._channels.get(channel)
        if entry is not None:
            for waiter in entry.waiters:
                waiter._deliver(message)

    def _lost(self, error: BaseException) -> None:
        """The listener's connection failed for good: fail every waiter; the next subscribe
        opens a new connection (entries still hold the dead listener, which no longer
        matches, so they subscribe again)."""
        self._listener = None
        for entry in self._channels.values():
            for waiter in entry.waiters:
                waiter._fail(error)

    async def close(self) -> None:
        """Fail current waiters, refuse new ones, and close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        listener, self._listener = self._listener, None
        for entry in self._channels.values():
            for waiter in entry.waiters:
                waiter._fail(CoordinationError("the coordinator is closed"))
        if listener is not None:
            await listener.close()
