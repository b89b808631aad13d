"""The Coordinator protocol (layer: coord; imports errors only).

Everything replicas must agree on *right now* and may lose on a crash: leases with TTL,
pub/sub, per-key marks ("this thread has more work"), and counters for rate limits.
Postgres stays the truth; a lost coordinator only delays work until leases expire and the
reaper sweeps.

Two implementations: `LocalCoordinator` (one process) and `RedisCoordinator` (many replicas).

Two ways to receive: `subscribe(*channels)` gives a subscription of its own (on Redis, its own
connection: for the few long-lived listeners of the engine), and `hub.subscribe(channel)`
shares one connection per process among any number of waiters (see coord.fanout: for
anything a tenant's request can multiply, such as long-polls).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ator.coord.fanout import Hub

__all__ = ["Coordinator", "Deliver", "Listener", "Lost", "Subscription"]

Deliver = Callable[[str, str], None]  # (channel, message), called on the reader's task
Lost = Callable[[BaseException], None]  # the listener's connection is gone for good


@runtime_checkable
class Subscription(Protocol):
    """Messages published on the subscribed channels, in order, until closed."""

    def __aiter__(self) -> AsyncIterator[tuple[str, str]]: ...

    async def close(self) -> None: ...


@runtime_checkable
class Listener(Protocol):
    """One pub/sub connection whose channels change while it lives: the hub's transport.

    Channels are not reference-counted here (the hub does that); adding a channel twice is
    harmless, removing it once ends it."""

    async def add(self, channel: str) -> None:
        """Subscribe `channel`; returns once messages published after it will be delivered.
        Raises CoordinationError."""
        ...

    async def remove(self, channel: str) -> None:
        """Unsubscribe `channel` (does not wait for the confirmation)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class Coordinator(Protocol):
    name: str
    hub: Hub  # the process's shared subscription (coord.fanout)

    async def acquire(self, key: str, token: str, ttl: float) -> bool:
        """Take the lease `key` for `token` if free (or already ours); True on success."""
        ...

    async def extend(self, key: str, token: str, ttl: float) -> bool:
        """Push the lease's expiry out by `ttl`; False if we no longer hold it."""
        ...

    async def release(self, key: str, token: str) -> bool:
        """Release only if `token` still holds it (compare-and-delete); True if released."""
        ...

    async def claim(self, key: str, token: str, ttl: float, mark: str) -> tuple[bool, bool]:
        """`acquire(key, token, ttl)` and, when that succeeds, `take_mark(mark)`, as one
        atomic step: (acquired, mark taken). Another holder's lease leaves the mark alone."""
        ...

    async def release_unless_marked(self, key: str, token: str, mark: str) -> bool:
        """As one atomic step, while `token` holds the lease: if `mark` is set, take it and
        keep the lease (True: more work came); otherwise release the lease (False). So a
        mark set before the release is never left behind with nobody holding the lease.
        A lease that is no longer `token`'s gives False and leaves the mark to its holder."""
        ...

    async def holder(self, key: str) -> str | None:
        """The token holding `key`, or None when free or expired."""
        ...

    async def publish(self, channel: str, message: str) -> int:
        """Send `message` to the channel's current subscribers; returns how many received
        it (with Redis: on every replica; 0 means nobody anywhere listens right now)."""
        ...

    def subscribe(self, *channels: str) -> AbstractAsyncContextManager[Subscription]:
        """Subscribe; the subscription is live when the context is entered."""
        ...

    async def listen(self, deliver: Deliver, lost: Lost) -> Listener:
        """Open one pub/sub connection with no channel yet; `deliver` gets its messages.
        Used by the hub; anything else wants `hub.subscribe` or `subscribe`."""
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
