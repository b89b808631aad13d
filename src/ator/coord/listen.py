"""Following one channel for the life of the process (layer: coord; imports coord.base,
obs.logging).

`listen_forever(coord, channel, handle)` subscribes and hands every message to `handle`
(synchronously: it must only record or schedule). When the subscription fails or ends (the
coordinator went away), it subscribes again with backoff (0.1 s doubling to 2 s). `on_state`
is told True once the subscription is live and False when it is lost, so an owner can report
itself not ready meanwhile. Cancel the task to stop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ator.coord.base import Coordinator
from ator.obs.logging import get_logger

__all__ = ["listen_forever"]

log = get_logger("ator.coord.listen")


async def listen_forever(
    coord: Coordinator,
    channel: str,
    handle: Callable[[str], None],
    on_state: Callable[[bool], None] = lambda live: None,
) -> None:
    backoff = 0.1
    while True:
        try:
            async with coord.subscribe(channel) as sub:
                on_state(True)
                backoff = 0.1
                async for _channel, message in sub:
                    handle(message)
            # The subscription ended without an error (the backend closed it): resubscribe.
        except asyncio.CancelledError:
            on_state(False)
            raise
        except Exception:
            log.warning("lost the subscription to %s; resubscribing", channel, exc_info=True)
        on_state(False)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 2.0)
