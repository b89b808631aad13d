"""Token deltas nobody listens to are not published (engine.publish): a turn whose delta
batch reached no subscriber goes quiet until someone announces interest in its thread or it
ends, on one process and across two replicas on Redis."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from ator.coord.base import Coordinator
from ator.coord.local import LocalCoordinator
from ator.engine.publish import Publisher, want_deltas
from ator.engine.wire import DELTAS_WANTED_CHANNEL, delta_channel
from ator.providers.base import TextDelta
from ator.store.records import Event
from ator.store.scope import Scope
from tests.conftest import Pair


class Counting(LocalCoordinator):
    """The local coordinator, counting what was published per channel (a spy on the
    publisher's dependency, not on the publisher)."""

    def __init__(self) -> None:
        super().__init__()
        self.published: dict[str, int] = {}

    async def publish(self, channel: str, message: str) -> int:
        self.published[channel] = self.published.get(channel, 0) + 1
        return await super().publish(channel, message)


async def batch(publisher: Publisher, thread: uuid.UUID, turn: uuid.UUID, text: str) -> None:
    publisher.delta(thread, turn, TextDelta(text))
    await asyncio.sleep(0.06)  # past the coalescing window: the batch is flushed


@asynccontextmanager
async def publishing(coord: Coordinator, *, start: bool = True) -> AsyncIterator[Publisher]:
    """A publisher on `coord` (started: following announcements of interest); both closed
    afterwards."""
    publisher = Publisher(coord)
    if start:
        await publisher.start()
    try:
        yield publisher
    finally:
        await publisher.aclose()
        await coord.close()


async def batches(publisher: Publisher, thread: uuid.UUID, turn: uuid.UUID, n: int) -> None:
    """`n` delta batches of one turn, each flushed."""
    for i in range(n):
        await batch(publisher, thread, turn, f"t{i}")


def ended(turn: uuid.UUID) -> Event:
    return Event(seq=9, kind="turn_ended", data={}, turn_id=turn, created_at=datetime.now(UTC))


async def test_a_turn_nobody_watches_publishes_one_delta_batch_then_goes_quiet() -> None:
    coord = Counting()
    thread, turn = uuid.uuid4(), uuid.uuid4()
    async with publishing(coord) as publisher:
        await batches(publisher, thread, turn, 5)
        assert coord.published[delta_channel(thread)] == 1  # the probe; then nothing
        # The next turn of the thread probes again (someone may have come meanwhile).
        await publisher.events(Scope(uuid.uuid4()), thread, [ended(turn)])
        await batch(publisher, thread, uuid.uuid4(), "next")
        assert coord.published[delta_channel(thread)] == 2


async def test_without_the_interest_subscription_every_batch_is_published() -> None:
    coord = Counting()
    thread, turn = uuid.uuid4(), uuid.uuid4()
    # Never started: announcements of interest could not reach it.
    async with publishing(coord, start=False) as publisher:
        await batches(publisher, thread, turn, 3)
        assert coord.published[delta_channel(thread)] == 3


async def test_a_listener_that_arrives_mid_turn_gets_the_rest_of_it(pair: Pair) -> None:
    turn_side, listener_side = pair
    publisher = Publisher(turn_side)
    await publisher.start()
    thread, turn = uuid.uuid4(), uuid.uuid4()
    try:
        await batch(publisher, thread, turn, "unheard ")  # nobody yet: the turn goes quiet
        await batch(publisher, thread, turn, "dropped ")
        async with listener_side.subscribe(delta_channel(thread)) as sub:
            await want_deltas(listener_side, thread)
            received: list[str] = []

            async def read() -> None:
                async for _channel, message in sub:
                    received.extend(frame["text"] for frame in json.loads(message))
                    if "last" in received:
                        return

            reader = asyncio.create_task(read())
            for _ in range(100):  # the announcement travels (over Redis: another client)
                if not publisher._unwatched:
                    break
                await asyncio.sleep(0.01)
            await batch(publisher, thread, turn, "heard ")
            await batch(publisher, thread, turn, "last")
            await asyncio.wait_for(reader, 5)
        assert received == ["heard ", "last"]
    finally:
        await publisher.aclose()


class Overtaken(Counting):
    """A listener subscribes just after the first delta batch reached nobody, and its
    announcement arrives before that publish's reply (two connections, no order)."""

    async def publish(self, channel: str, message: str) -> int:
        heard = await super().publish(channel, message)
        if channel.startswith("deltas:") and self.published[channel] == 1:
            await super().publish(DELTAS_WANTED_CHANNEL, channel.removeprefix("deltas:"))
            await asyncio.sleep(0.01)  # the announcement is handled before this reply
        return heard


async def test_an_announcement_that_overtakes_the_publish_keeps_the_turn_loud() -> None:
    coord = Overtaken()
    thread, turn = uuid.uuid4(), uuid.uuid4()
    async with publishing(coord) as publisher:
        await batches(publisher, thread, turn, 3)
        # The overtaken first batch did not make the turn quiet: the second was published
        # (and, reaching nobody with no announcement on its way, that one did).
        assert coord.published[delta_channel(thread)] == 2
