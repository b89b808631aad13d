"""The Coordinator protocol (layer: coord; imports errors only).

Everything replicas must agree on *right now* and may lose on a crash: leases with TTL,
pub/sub, per-key marks ("this thread has more work"), and counters for rate limits.
Postgres stays the truth; a lost coordinator only delays work until leases expire and the
reaper sweeps.

Two implementations: `LocalCoordinator` (one process) and `RedisCoordinator` (many replicas).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

__all__ = ["Coordinator", "Subscription"]


@runtime_checkable
class Subscription(Protocol):
    """Messages published on the subscribed channels, in order, until closed."""

    def __aiter__(self) -> AsyncIterator[tuple[str, str]]: ...

    async def close(self) -> None: ...


@runtime_checkable
class Coordinator(Protocol):
    name: str

    async def acquire(self, key: str, token: str, ttl: float) -> bool:
        """Take the lease `key` for `token` if free (or already ours); True on success."""
        ...

    async def extend(self, key: str, token: str, ttl: float) -> bool:
        """Push the lease's expiry out by `ttl`; False if we no longer hold it."""
        ...

    async def release(self, key: str, token: str) -> bool:
        """Release only if `token` still holds it (compare-and-delete); True if released."""
        ...

    async def holder(self, key: str) -> str | None:
        """The token holding `key`, or None when free or expired."""
        ...

    async def publish(self, channel: str, message: str) -> None: ...

    def subscribe(self, *channels: str) -> AbstractAsyncContextManager[Subscription]:
        """Subscribe; the subscription is live when the context is entered."""
        ...

    async def mark(self, key: str, ttl: float) -> None:
        """Set a flag that expires after `ttl` seconds."""
        ...

    async def take_mark(self, key: str) -> bool:
        """Clear the flag; True if it was set."""
        ...

    async def hit(self, key: str, window: float) -> int:
        """Count one event in a fixed window of `window` seconds; returns the count so far."""
        ...

    async def ping(self) -> bool: ...

    async def close(self) -> None: ...
