"""The turn's fence: before it acts, a turn makes sure it still holds its thread (layer: agent;
imports nothing of ator).

A turn's writes are fenced by the database (a step lands only while its row is running and
its own), but its side effects are not: a model call spends money and a tool call reaches
the world the moment they start. A replica paused past its lease (SIGSTOP, a long GC, a
frozen VM) would otherwise, once resumed, run the tool call its stale turn had asked for
after another replica took the thread over. So the loop awaits the turn's `Fence` before
every model call's hooks (the budget reservation and compaction's own call are among them)
and before the step's tools run, and a fence whose turn was taken raises (the engine's
`TurnLost`), so nothing of that step happens.

A fence must be cheap on the hot path: the engine's knows locally, on the monotonic clock,
until when nobody else can have taken the turn, and asks the coordinator and the database
only when that time is near or past (engine.liveness).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

__all__ = ["Fence", "unfenced"]

# Awaited before a side effect; returns when the turn may act, raises when it may not.
Fence = Callable[[], Awaitable[None]]


async def unfenced() -> None:
    """The fence of a turn that nobody else can take (tests, one-off loops)."""
