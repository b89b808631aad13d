"""The bounded cache of built providers (layer: providers; imports providers.base).

A provider holds an HTTP connection pool, so the registry reuses one per distinct client
shape. The cache is an LRU of at most `size` entries; an evicted entry is closed as soon as no
stream is running on it (a turn mid-call keeps its client until that call ends). What the
registry hands out is a thin view that counts running streams for exactly that purpose.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field

from ator.providers.base import ModelRequest, Provider, StreamEvent

__all__ = ["CachedProvider", "ProviderCache"]

Closer = Callable[[], Awaitable[None]]


@dataclass(slots=True, eq=False)
class _Entry:
    provider: Provider
    closers: list[Closer]
    active: int = 0
    retired: bool = False
    closed: bool = False
    view: CachedProvider | None = field(default=None)

    async def close_if_idle(self) -> None:
        if self.retired and self.active == 0 and not self.closed:
            self.closed = True
            for close in self.closers:
                await close()


class CachedProvider:
    """The provider as the registry hands it out: same name, same stream, counted."""

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry
        self.name = entry.provider.name

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Provider]:
        """Keep the client open for the block even if it is evicted meanwhile (a turn holds
        its provider from build to its last model call)."""
        entry = self._entry
        entry.active += 1
        try:
            yield self
        finally:
            entry.active -= 1
            await entry.close_if_idle()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        entry = self._entry
        entry.active += 1
        try:
            async for event in entry.provider.stream(request):
                yield event
        finally:
            entry.active -= 1
            await entry.close_if_idle()


class ProviderCache:
    """At most `size` providers, least recently used evicted first."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("cache size must be at least 1")
        self.size = size
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> CachedProvider | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        assert entry.view is not None
        return entry.view

    async def put(self, key: Hashable, provider: Provider, closers: list[Closer]) -> CachedProvider:
        """Keep `provider` under `key` (closed later with `closers`, in order) and return the
        view to hand out. Evicts, and closes when idle, the least recently used beyond size."""
        entry = _Entry(provider, closers)
        entry.view = CachedProvider(entry)
        old = self._entries.pop(key, None)
        self._entries[key] = entry
        if old is not None:
            await self._retire(old)
        while len(self._entries) > self.size:
            _, evicted = self._entries.popitem(last=False)
            await self._retire(evicted)
        return entry.view

    async def aclose(self) -> None:
        """Retire every entry: idle ones close now, busy ones when their stream ends."""
        entries = list(self._entries.values())
        self._entries.clear()
        for entry in entries:
            await self._retire(entry)

    @staticmethod
    async def _retire(entry: _Entry) -> None:
        entry.retired = True
        await entry.close_if_idle()
