"""Admission: a bound on the thread pumps (turns in flight) one process runs at once (layer:
engine; imports store.scope only).

A woken thread beyond the bound is not a task: only its id waits here, in wake order, while
its items wait durably in the mailbox. When a pump ends, the first waiting thread takes its
slot. A process that dies loses only this queue of ids; the reaper's sweep of mailbox items
pending for longer than a lease wakes those threads again on any replica.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from uuid import UUID

from ator.store.scope import Scope

__all__ = ["Admission", "Admitted"]


@dataclass(frozen=True, slots=True)
class Admitted:
    """A thread given a slot: start its pump."""

    scope: Scope
    thread_id: UUID
    force: bool


class Admission:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the admission limit must be at least 1")
        self.limit = limit
        self._active = 0
        self._waiting: OrderedDict[UUID, Admitted] = OrderedDict()

    @property
    def in_flight(self) -> int:
        """Slots taken (pumps running)."""
        return self._active

    @property
    def waiting(self) -> int:
        """Threads woken but not yet given a slot."""
        return len(self._waiting)

    def enter(self, scope: Scope, thread_id: UUID, *, force: bool = False) -> bool:
        """Take a slot for the thread (True: start its pump now) or queue it (False). A
        thread already queued keeps its place; `force` is kept if any wake asked for it."""
        queued = self._waiting.get(thread_id)
        if queued is not None:
            if force and not queued.force:
                self._waiting[thread_id] = Admitted(scope, thread_id, True)
            return False
        if self._active < self.limit and not self._waiting:
            self._active += 1
            return True
        self._waiting[thread_id] = Admitted(scope, thread_id, force)
        return False

    def take(self) -> bool:
        """Take a free slot now (True), or nothing: never queues, and never goes ahead of
        threads already waiting."""
        if self._active < self.limit and not self._waiting:
            self._active += 1
            return True
        return False

    def leave(self) -> Admitted | None:
        """Give a slot back; returns the next queued thread, which now holds that slot."""
        if self._waiting:
            _, admitted = self._waiting.popitem(last=False)
            return admitted
        self._active = max(0, self._active - 1)
        return None

    def clear(self) -> int:
        """Forget the queue (shutdown); returns how many threads were waiting."""
        dropped = len(self._waiting)
        self._waiting.clear()
        return dropped
