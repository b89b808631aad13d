"""The in-process Coordinator, for one replica (layer: coord; imports stdlib and coord.base).

Leases, marks and counters are plain dicts keyed by name with a deadline on the injected
clock (`time.monotonic` by default); pub/sub fans out to one `asyncio.Queue` per
subscriber. Nothing here awaits: every method completes synchronously, so a turn taking a
lease costs a dict lookup, no task and no lock (the event loop is the lock).

Expired entries are dropped when touched, and by an occasional sweep whose threshold
doubles with the live size, so keys nobody touches again cannot pile up (amortized O(1)).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable
from types import TracebackType

from ator.coord.base import Deliver, Listener, Lost, Subscription
from ator.coord.fanout import Hub

__all__ = ["LocalCoordinator"]

_MIN_SWEEP = 1024  # entries before the first sweep


def _positive(value: float, what: str) -> float:
    if not value > 0:  # also rejects NaN
        raise ValueError(f"{what} must be positive, got {value!r}")
    return value


class _LocalSubscription:
    """A subscriber's inbox; it is also its own context manager (enter = subscribe)."""

    def __init__(self, owner: LocalCoordinator, channels: tuple[str, ...]) -> None:
        self._owner = owner
        self._channels = channels
        # None marks the end; it is put back when seen so every iterator stops.
        self._queue: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        self._closed = False

    def _deliver(self, item: tuple[str, str]) -> None:
        self._queue.put_nowait(item)

    async def __aenter__(self) -> Subscription:
        if self._closed:
            raise RuntimeError("subscription already closed")
        self._owner._attach(self, self._channels)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def __aiter__(self) -> AsyncIterator[tuple[str, str]]:
        while True:
            item = await self._queue.get()
            if item is None:
                self._queue.put_nowait(None)
                return
            yield item

    async def close(self) -> None:
        """Stop receiving; iterators get what was already delivered, then stop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._owner._detach(self, self._channels)
        self._queue.put_nowait(None)


class _LocalListener:
    """The hub's listener in one process: a subscriber whose channels change."""

    def __init__(self, owner: LocalCoordinator, deliver: Deliver) -> None:
        self._owner = owner
        self._deliver_to = deliver
        self._channels: set[str] = set()

    def _deliver(self, item: tuple[str, str]) -> None:
        self._deliver_to(*item)

    async def add(self, channel: str) -> None:
        self._channels.add(channel)
        self._owner._attach(self, (channel,))

    async def remove(self, channel: str) -> None:
        self._channels.discard(channel)
        self._owner._detach(self, (channel,))

    async def close(self) -> None:
        self._owner._detach(self, tuple(self._channels))
        self._channels.clear()


class LocalCoordinator:
    """Coordinator for a single process. `clock` returns seconds (monotonic)."""

    name = "local"

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._leases: dict[str, tuple[str, float]] = {}  # key -> (token, expires_at)
        self._marks: dict[str, float] = {}  # key -> expires_at
        self._hits: dict[str, tuple[int, int, float]] = {}  # key -> (window no, count, ends_at)
        self._subscribers: dict[str, set[_LocalSubscription | _LocalListener]] = {}
        self._sweep_at = _MIN_SWEEP
        self.hub = Hub(self.listen)

    # -- leases -----------------------------------------------------------------------------

    async def acquire(self, key: str, token: str, ttl: float) -> bool:
        """Take `key` for `token` if free, expired or already ours (then the ttl restarts)."""
        now = self._clock()
        expires_at = now + _positive(ttl, "ttl")
        held = self._leases.get(key)
        if held is not None and held[0] != token and held[1] > now:
            return False
        self._leases[key] = (token, expires_at)
        if held is None:
            self._maybe_sweep(now)
        return True

    async def extend(self, key: str, token: str, ttl: float) -> bool:
        """Restart the lease's ttl from now; False if `token` no longer holds it."""
        now = self._clock()
        held = self._leases.get(key)
        if held is None or held[0] != token or held[1] <= now:
            return False
        self._leases[key] = (token, now + _positive(ttl, "ttl"))
        return True

    async def release(self, key: str, token: str) -> bool:
        """Release if `token` holds it; True if released (False if expired or someone else's)."""
        held = self._leases.get(key)
        if held is None or held[0] != token:
            return False
        del self._leases[key]
        return held[1] > self._clock()

    async def claim(self, key: str, token: str, ttl: float, mark: str) -> tuple[bool, bool]:
        if not await self.acquire(key, token, ttl):
            return False, False
        return True, await self.take_mark(mark)

    async def release_unless_marked(self, key: str, token: str, mark: str) -> bool:
        if await self.holder(key) != token:
            return False  # not ours any more: the mark is left for the holder
        if await self.take_mark(mark):
            return True
        await self.release(key, token)
        return False

    async def holder(self, key: str) -> str | None:
        held = self._leases.get(key)
        if held is None:
            return None
        if held[1] <= self._clock():
            del self._leases[key]
            return None
        return held[0]

    # -- pub/sub ----------------------------------------------------------------------------

    async def publish(self, channel: str, message: str) -> int:
        subscribers = self._subscribers.get(channel)
        if not subscribers:
            return 0
        item = (channel, message)
        for subscriber in subscribers:
            subscriber._deliver(item)
        return len(subscribers)

    def subscribe(self, *channels: str) -> _LocalSubscription:
        """Subscribe to `channels`; live (and receiving) once the context is entered."""
        if not channels:
            raise ValueError("subscribe needs at least one channel")
        return _LocalSubscription(self, tuple(dict.fromkeys(channels)))

    async def listen(self, deliver: Deliver, lost: Lost) -> Listener:
        """A listener for the hub; in one process it cannot be lost, so `lost` is unused."""
        return _LocalListener(self, deliver)

    def _attach(self, subscription: _LocalSubscription | _LocalListener,
                channels: tuple[str, ...]) -> None:
        for channel in channels:
            self._subscribers.setdefault(channel, set()).add(subscription)

    def _detach(self, subscription: _LocalSubscription | _LocalListener,
                channels: tuple[str, ...]) -> None:
        for channel in channels:
            subscribers = self._subscribers.get(channel)
            if subscribers is not None:
                subscribers.discard(subscription)
                if not subscribers:
                    del self._subscribers[channel]

    # -- marks and counters -----------------------------------------------------------------

    async def mark(self, key: str, ttl: float) -> None:
        now = self._clock()
        self._marks[key] = now + _positive(ttl, "ttl")
        self._maybe_sweep(now)

    async def take_mark(self, key: str) -> bool:
        expires_at = self._marks.pop(key, None)
        return expires_at is not None and expires_at > self._clock()

    async def hit(self, key: str, window: float) -> int:
        """Count one event in the window `floor(now / window)`; returns the count so far."""
        now = self._clock()
        number = math.floor(now / _positive(window, "window"))
        current = self._hits.get(key)
        if current is not None and current[0] == number:
            count = current[1] + 1
        else:
            count = 1
            self._maybe_sweep(now)
        self._hits[key] = (number, count, (number + 1) * window)
        return count

    # -- lifecycle --------------------------------------------------------------------------

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        """End every live subscription and forget all state. Idempotent."""
        await self.hub.close()
        for subscribers in list(self._subscribers.values()):
            for subscription in list(subscribers):
                await subscription.close()
        self._leases.clear()
        self._marks.clear()
        self._hits.clear()

    def _maybe_sweep(self, now: float) -> None:
        if len(self._leases) + len(self._marks) + len(self._hits) < self._sweep_at:
            return
        self._leases = {k: v for k, v in self._leases.items() if v[1] > now}
        self._marks = {k: v for k, v in self._marks.items() if v > now}
        self._hits = {k: v for k, v in self._hits.items() if v[2] > now}
        live = len(self._leases) + len(self._marks) + len(self._hits)
        self._sweep_at = max(_MIN_SWEEP, 2 * live)
