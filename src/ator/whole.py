"""Work that a cancellation waits for instead of cutting in two (layer: bottom; imports
nothing of ator).

A turn is cut by its timeout or a stop at whatever `await` it is in. When that await is a
statement that may already have committed (a budget reservation, a step write), cutting it
leaves the caller not knowing what the database holds: a reservation is held with nobody to
give it back, a billed call is written but its events are never announced, or is not written
and its bill is lost. `whole(work)` runs the work as its own task; a cancellation of the
caller waits for that task to end (it finishes what it started, and the state it updates
matches the database), then goes through. A second cancellation meanwhile goes through at
once, the work still running on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["whole"]

log = logging.getLogger(__name__)

T = TypeVar("T")


async def whole(work: Coroutine[Any, Any, T]) -> T:
    """`await work`, except that a cancellation lands after it rather than inside it."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])
        if not task.cancelled() and (exc := task.exception()) is not None:
            # The cut is what the caller sees; what the work failed with is only logged.
            log.warning("work cut by a cancellation also failed: %r", exc)
        raise
