"""The logs a socket room follows, behind one interface (layer: realtime; imports
engine.runtime, engine.wire, the workflows service).

A room replays a log from a cursor and then goes live (realtime.feed). A log is any record
with a dense per-key `seq`: a thread's events (`thread:<id>`) or a workflow run's events
(`run:<id>`). Each `Log` says how to check that the caller's org owns a key (NotFound
otherwise, before anything is joined), read a page of frames after a seq, open the live
frames from now on, resume them after a failure, and frame an error for the room.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol
from uuid import UUID

from ator.engine.runtime import Ator
from ator.engine.wire import error_frame, run_error_frame, run_frame
from ator.store.scope import Scope
from ator.workflows import RunEvents

__all__ = ["Frames", "Log", "RunLog", "ThreadLog"]

Frames = AsyncGenerator[dict[str, Any] | None, None]


class Log(Protocol):
    room: str  # the room's prefix: "thread" | "run"

    async def check(self, scope: Scope, key: UUID) -> None: ...

    async def read(self, scope: Scope, key: UUID, *, after_seq: int,
                   limit: int) -> list[dict[str, Any]]: ...

    async def open(self, scope: Scope, key: UUID, *, recheck: float) -> tuple[int, Frames]: ...

    def resume(self, scope: Scope, key: UUID, *, after_seq: int, recheck: float) -> Frames: ...

    def error(self, key: UUID, code: str, status: int, detail: str) -> dict[str, Any]: ...


class ThreadLog:
    """A thread's events and token deltas (engine.stream through `Ator`)."""

    room = "thread"

    def __init__(self, ator: Callable[[], Ator]) -> None:
        self._ator = ator

    async def check(self, scope: Scope, key: UUID) -> None:
        await self._ator().read_frames(scope, key, after_seq=0, limit=1, check=True)

    async def read(self, scope: Scope, key: UUID, *, after_seq: int,
                   limit: int) -> list[dict[str, Any]]:
        return await self._ator().read_frames(scope, key, after_seq=after_seq, limit=limit)

    async def open(self, scope: Scope, key: UUID, *, recheck: float) -> tuple[int, Frames]:
        return await self._ator().open_feed(scope, key, recheck=recheck)

    def resume(self, scope: Scope, key: UUID, *, after_seq: int, recheck: float) -> Frames:
        return self._ator().resume_feed(scope, key, after_seq=after_seq, recheck=recheck)

    def error(self, key: UUID, code: str, status: int, detail: str) -> dict[str, Any]:
        return error_frame(key, code, status, detail)


class RunLog:
    """A workflow run's events (the workflows' `RunEvents`: committed, coalesced)."""

    room = "run"

    def __init__(self, ator: Callable[[], Ator]) -> None:
        self._ator = ator

    def _events(self) -> RunEvents:
        return self._ator().service(RunEvents)

    async def check(self, scope: Scope, key: UUID) -> None:
        await self._events().last_seq(scope, key)

    async def read(self, scope: Scope, key: UUID, *, after_seq: int,
                   limit: int) -> list[dict[str, Any]]:
        rows = await self._events().read(scope, key, after_seq=after_seq, limit=limit)
        return [run_frame(key, r) for r in rows]

    async def open(self, scope: Scope, key: UUID, *, recheck: float) -> tuple[int, Frames]:
        seq = await self._events().last_seq(scope, key)
        return seq, self.resume(scope, key, after_seq=seq, recheck=recheck)

    async def resume(self, scope: Scope, key: UUID, *, after_seq: int,
                     recheck: float) -> Frames:
        async for rows in self._events().follow(scope, key, after_seq=after_seq,
                                                recheck=recheck):
            if rows is None:
                yield None
                continue
            for row in rows:
                yield run_frame(key, row)

    def error(self, key: UUID, code: str, status: int, detail: str) -> dict[str, Any]:
        return run_error_frame(key, code, status, detail)
