"""A small per-process cache with a TTL (layer: engine; imports nothing of ator)."""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

__all__ = ["Recent"]


class Recent:
    """A small per-process cache with a TTL: what a turn reads at its start (the org's MCP
    servers, a setup's policy) is read once per TTL, not once per turn, so a turn costs no
    statement more than before. Writes through this process drop their entry at once; another
    replica's writes are seen within the TTL."""

    def __init__(self, ttl: float, size: int = 4096) -> None:
        self.ttl = ttl
        self.size = size
        self._items: OrderedDict[object, tuple[float, Any]] = OrderedDict()

    def get(self, key: object) -> Any | None:
        found = self._items.get(key)
        if found is None or found[0] < time.monotonic():
            return None
        return found[1]

    def put(self, key: object, value: Any) -> None:
        self._items[key] = (time.monotonic() + self.ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def drop(self, key: object) -> None:
        self._items.pop(key, None)
