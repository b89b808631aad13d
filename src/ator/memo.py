"""Remembering what was computed from a long-lived object, by its identity (layer: bottom;
imports nothing of ator).

Tools, their specs and similar values are built once and come back as the same objects turn
after turn, but they hold dicts, so they cannot be dictionary keys. `ByIdentity` keys on
`id(obj)` and a slot name, keeps `obj` itself with the entry (so an id is never taken for
another object's while it is remembered) and forgets the least recently used past `size`.
What is remembered must not depend on anything that changes in `obj`: use it for frozen
values only.

`of_all` does the same for a sequence of such objects (a request's tool specs): one entry per
the same objects in the same order, so a list rebuilt from them call after call is looked up
once instead of once per member.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["ByIdentity"]

K = TypeVar("K")
V = TypeVar("V")


class ByIdentity(Generic[K, V]):
    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, tuple[Any, V]] = OrderedDict()

    def get(self, obj: K, make: Callable[[K], V], slot: Hashable = None) -> V:
        """`make(obj)`, computed once per object (and slot) while remembered."""
        key = (id(obj), slot)
        found = self._entries.get(key)
        if found is not None and found[0] is obj:
            self._entries.move_to_end(key)
            return found[1]
        return self._keep(key, obj, make(obj))

    def of_all(self, objs: Sequence[K], make: Callable[[tuple[K, ...]], V],
               slot: Hashable = None) -> V:
        """`make(tuple(objs))`, computed once per the same objects in the same order (and
        slot) while remembered."""
        members = tuple(objs)
        key = (tuple(map(id, members)), slot, "all")
        found = self._entries.get(key)
        if found is not None and all(map(operator.is_, found[0], members)):
            self._entries.move_to_end(key)
            return found[1]
        return self._keep(key, members, make(members))

    def _keep(self, key: Hashable, held: Any, value: V) -> V:
        """Remember `value` under `key` with what it was made from (kept alive, so its ids
        are not reused meanwhile), forgetting the least recently used past the size."""
        self._entries[key] = (held, value)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return value
