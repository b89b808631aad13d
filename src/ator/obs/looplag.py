"""Event-loop lag of this process (layer: obs; imports asyncio only).

A task asks to wake every `interval` seconds and records how late it woke. `lag` is the
worst delay over the last `window` seconds: what a request arriving now may wait before the
loop even looks at it. Readiness and /metrics report it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

__all__ = ["LoopLag"]


class LoopLag:
    def __init__(self, *, interval: float = 0.1, window: float = 5.0) -> None:
        self.interval = interval
        self.window = window
        self._samples: deque[tuple[float, float]] = deque()
        self._task: asyncio.Task[None] | None = None

    @property
    def lag(self) -> float:
        """Worst lateness (seconds) seen over the window, including an ongoing one."""
        if self._task is None:
            return 0.0
        loop = asyncio.get_running_loop()
        now = loop.time()
        while self._samples and self._samples[0][0] < now - self.window:
            self._samples.popleft()
        worst = max((late for _, late in self._samples), default=0.0)
        return worst

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="ator-loop-lag")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.interval)
            woke = loop.time()
            self._samples.append((woke, max(0.0, woke - asked - self.interval)))
