"""Requests first: work a request hands the process starts once the requests are answered
(layer: bottom; imports nothing of ator).

Under a burst (a thousand messages posted at once) one event loop both answers the POSTs
and starts the turns they create. Interleaved, every turn's start (its context, its
provider request) lands between two answers, and the last POST of the burst waits behind
nearly all of the turns ahead of it. A `Foreground` counts the requests being answered (the
API's middleware enters when a request arrives and leaves when its response starts); a
turn about to start awaits `after_requests()`, which returns at once when none are in
flight, else when the last one is answered, and at the latest after `max_wait` seconds
(so a steady stream of requests delays a turn by that much at most, never starves it).
"""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["Foreground"]


class Foreground:
    def __init__(self, max_wait: float) -> None:
        self.max_wait = max_wait
        self.in_flight = 0
        self._quiet: asyncio.Event | None = None  # set when in_flight falls back to 0

    def enter(self) -> None:
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0 and self._quiet is not None:
            self._quiet.set()
            self._quiet = None

    async def after_requests(self) -> None:
        """Return once no request is in flight, or after `max_wait` seconds."""
        if self.in_flight == 0 or self.max_wait <= 0:
            return
        if self._quiet is None:
            self._quiet = asyncio.Event()
        quiet = self._quiet
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.max_wait):
                await quiet.wait()
