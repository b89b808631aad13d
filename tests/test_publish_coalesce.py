"""Token deltas are coalesced by rate, not by delay (engine.publish): a delta that finds no
batch of its thread published within the window goes at once, with whatever the same moment
adds to it; a thread publishes at most one batch per window; threads do not hold each
other back."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

from ator.coord.local import LocalCoordinator
from ator.engine import publish
from ator.engine.publish import Publisher
from ator.engine.wire import delta_channel
from ator.jsonenc import loads
from ator.providers.base import TextDelta

_YIELDS = 5  # loop turns that are more than enough for a flush that waits for no timer


async def _turns(n: int = _YIELDS) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _next(messages: AsyncIterator[tuple[str, str]], timeout: float = 5.0
                ) -> list[dict[str, Any]]:
    """The next published batch; `timeout` only bounds a failure (with the batch already
    delivered, no timer is involved)."""
    async with asyncio.timeout(timeout):
        _channel, message = await anext(messages)
    batch: list[dict[str, Any]] = loads(message)
    return batch


async def test_a_delta_after_a_quiet_moment_is_published_without_waiting_for_the_window(
) -> None:
    coord = LocalCoordinator()
    publisher = Publisher(coord)
    thread, turn = uuid.uuid4(), uuid.uuid4()
    try:
        async with coord.subscribe(delta_channel(thread)) as sub:
            messages = aiter(sub)
            publisher.delta(thread, turn, TextDelta("a"))
            publisher.delta(thread, turn, TextDelta("b"))  # the same moment: one batch
            await _turns()  # no timer can have fired: nothing waited for the window
            batch = await _next(messages, timeout=0.001)
            assert [d["text"] for d in batch] == ["ab"]
    finally:
        await publisher.aclose()
        await coord.close()


async def test_a_thread_publishes_at_most_one_batch_per_window() -> None:
    coord = LocalCoordinator()
    publisher = Publisher(coord)
    thread, turn = uuid.uuid4(), uuid.uuid4()
    loop = asyncio.get_running_loop()
    try:
        async with coord.subscribe(delta_channel(thread)) as sub:
            messages = aiter(sub)
            publisher.delta(thread, turn, TextDelta("1"))
            await _next(messages)
            first = loop.time()
            publisher.delta(thread, turn, TextDelta("2"))
            await _turns()
            publisher.delta(thread, turn, TextDelta("3"))  # joins the waiting batch
            batch = await _next(messages)
            assert loop.time() - first >= publish._COALESCE * 0.99  # a timer never fires early
            assert [d["text"] for d in batch] == ["23"]
    finally:
        await publisher.aclose()
        await coord.close()


async def test_one_thread_s_window_does_not_delay_another_thread() -> None:
    coord = LocalCoordinator()
    publisher = Publisher(coord)
    busy, quiet, turn = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    try:
        async with coord.subscribe(delta_channel(busy)) as busy_sub, \
                coord.subscribe(delta_channel(quiet)) as quiet_sub:
            busy_in, quiet_in = aiter(busy_sub), aiter(quiet_sub)
            publisher.delta(busy, turn, TextDelta("x"))
            await _next(busy_in)
            publisher.delta(busy, turn, TextDelta("y"))  # waits for busy's window
            publisher.delta(quiet, turn, TextDelta("z"))  # does not
            await _turns()
            assert [d["text"] for d in await _next(quiet_in, timeout=0.001)] == ["z"]
            assert [d["text"] for d in await _next(busy_in)] == ["y"]
    finally:
        await publisher.aclose()
        await coord.close()
