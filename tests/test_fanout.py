"""The hub (coord.fanout): one subscription connection per process, fanned out in-process.

Run on both coordinators; on Redis the server itself is asked (CLIENT LIST, PUBSUB NUMSUB)
how many connections the hub holds and which channels are still subscribed.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
import redis.asyncio

from ator.coord import Coordinator, Hub, Listener, LocalCoordinator, RedisCoordinator, Waiter
from ator.coord.base import Deliver, Lost
from ator.errors import CoordinationError
from tests.conftest import REDIS_URL

DEADLINE = 5.0


@pytest.fixture(params=["local", pytest.param("redis", marks=pytest.mark.redis)])
async def coord(request: pytest.FixtureRequest) -> AsyncIterator[Coordinator]:
    made: Coordinator
    if request.param == "local":
        made = LocalCoordinator()
    else:
        made = RedisCoordinator(REDIS_URL, prefix=f"ator-test:{uuid.uuid4().hex}:")
    try:
        yield made
    finally:
        await made.close()


def channel() -> str:
    return f"thread:{uuid.uuid4().hex}"


async def _raw() -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)


async def subscribers(coord: Coordinator, name: str) -> int | None:
    """How many connections Redis has subscribed to `name` (None on the local coordinator)."""
    if not isinstance(coord, RedisCoordinator):
        return None
    raw = await _raw()
    try:
        counts = await raw.pubsub_numsub(coord._prefix + name)
    finally:
        await raw.aclose()
    return int(counts[0][1])


async def connections(coord: Coordinator) -> dict[str, int]:
    assert isinstance(coord, RedisCoordinator)
    raw = await _raw()
    try:
        clients = await raw.client_list()
    finally:
        await raw.aclose()
    counts: dict[str, int] = {}
    for client in clients:
        name = client.get("name", "")
        if name.startswith(coord._prefix):
            counts[name[len(coord._prefix):]] = counts.get(name[len(coord._prefix):], 0) + 1
    return counts


async def next_message(waiter: Waiter) -> str:
    message = await waiter.get(DEADLINE)
    assert message is not None, "no message within the deadline"
    return message


async def test_every_waiter_gets_each_message_published_after_entering(
    coord: Coordinator,
) -> None:
    a, b = channel(), channel()
    async with AsyncExitStack() as stack:
        on_a = [await stack.enter_async_context(coord.hub.subscribe(a)) for _ in range(3)]
        on_b = await stack.enter_async_context(coord.hub.subscribe(b))
        await coord.publish(a, "one")
        await coord.publish(b, "other")
        await coord.publish(a, "two")
        for waiter in on_a:
            assert [await next_message(waiter), await next_message(waiter)] == ["one", "two"]
            assert await waiter.get(0.05) is None  # nothing of b, nothing twice
        assert await next_message(on_b) == "other"
        assert coord.hub.channels == 2 and coord.hub.waiters == 4


async def test_get_times_out_with_none(coord: Coordinator) -> None:
    async with coord.hub.subscribe(channel()) as waiter:
        assert await waiter.get(0.05) is None


@pytest.mark.redis
async def test_many_waiters_on_many_channels_hold_one_redis_connection() -> None:
    coord = RedisCoordinator(REDIS_URL, prefix=f"ator-test:{uuid.uuid4().hex}:")
    try:
        names = [channel() for _ in range(50)]
        async with AsyncExitStack() as stack:
            waiters = [await stack.enter_async_context(coord.hub.subscribe(names[i % 50]))
                       for i in range(300)]
            assert (await connections(coord)).get("hub") == 1
            assert await subscribers(coord, names[7]) == 1  # one connection, six waiters
            await coord.publish(names[7], "hello")
            got = [await next_message(w) for w in waiters[7::50]]
            assert got == ["hello"] * 6
        # The last waiter of each channel unsubscribed it; the connection stays for reuse.
        assert [await subscribers(coord, n) for n in names[:5]] == [0] * 5
        assert coord.hub.channels == 0
        assert (await connections(coord)).get("hub") == 1
    finally:
        await coord.close()
    assert "hub" not in await connections(coord)


async def test_a_channel_is_unsubscribed_only_when_its_last_waiter_leaves(
    coord: Coordinator,
) -> None:
    name = channel()
    async with coord.hub.subscribe(name) as staying:
        async with coord.hub.subscribe(name):
            pass
        assert await subscribers(coord, name) in (1, None)
        await coord.publish(name, "still live")
        assert await next_message(staying) == "still live"
    assert await subscribers(coord, name) in (0, None)
    assert coord.hub.channels == 0


async def test_churn_on_one_channel_leaves_it_subscribed_exactly_while_waited_on(
    coord: Coordinator,
) -> None:
    """Waiters entering and leaving concurrently: the connection's subscription must end up
    matching whether anyone waits (no UNSUBSCRIBE overtaking a later SUBSCRIBE)."""
    name = channel()

    async def visit() -> None:
        async with coord.hub.subscribe(name):
            await asyncio.sleep(0)

    for _ in range(5):
        await asyncio.gather(*(visit() for _ in range(40)))
        assert await subscribers(coord, name) in (0, None)
        async with coord.hub.subscribe(name) as waiter:
            await asyncio.gather(*(visit() for _ in range(40)))
            await coord.publish(name, "after the churn")
            assert await next_message(waiter) == "after the churn"
    assert coord.hub.channels == 0


async def test_a_slow_waiter_loses_its_newest_messages_and_nobody_else_does(
    coord: Coordinator,
) -> None:
    name = channel()
    async with coord.hub.subscribe(name, inbox=3) as slow, \
            coord.hub.subscribe(name) as fast:
        for i in range(10):
            await coord.publish(name, str(i))
        assert [await next_message(fast) for _ in range(10)] == [str(i) for i in range(10)]
        assert [await next_message(slow) for _ in range(3)] == ["0", "1", "2"]
        assert slow.dropped == 7 and fast.dropped == 0
        assert await slow.get(0.05) is None


async def test_a_waiter_cancelled_while_waiting_leaves_no_subscription(
    coord: Coordinator,
) -> None:
    name = channel()
    entered = asyncio.Event()

    async def wait_forever() -> None:
        async with coord.hub.subscribe(name) as waiter:
            entered.set()
            await waiter.get()

    task = asyncio.create_task(wait_forever())
    await asyncio.wait_for(entered.wait(), DEADLINE)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert coord.hub.channels == 0
    assert await subscribers(coord, name) in (0, None)


async def test_closing_the_coordinator_fails_current_waiters_and_refuses_new_ones() -> None:
    coord = LocalCoordinator()
    async with coord.hub.subscribe(channel()) as waiter:
        await coord.close()
        with pytest.raises(CoordinationError):
            await waiter.get(DEADLINE)
    with pytest.raises(CoordinationError):
        async with coord.hub.subscribe(channel()):
            pass


@pytest.mark.redis
async def test_a_killed_hub_connection_fails_its_waiters_and_the_next_subscribe_reconnects(
) -> None:
    """CLIENT KILL of the hub's connection: current waiters get CoordinationError (a
    long-poll answers 503 and the client polls again), nobody hangs, and the next
    subscribe opens a new connection that receives."""
    coord = RedisCoordinator(REDIS_URL, prefix=f"ator-test:{uuid.uuid4().hex}:")
    name = channel()
    try:
        async with coord.hub.subscribe(name) as waiter:
            raw = await _raw()
            try:
                hub = [c for c in await raw.client_list()
                       if c.get("name") == coord._prefix + "hub"]
                assert len(hub) == 1
                await raw.client_kill_filter(_id=hub[0]["id"])
            finally:
                await raw.aclose()
            with pytest.raises(CoordinationError):
                await waiter.get(DEADLINE)
        async with coord.hub.subscribe(name) as again:
            await coord.publish(name, "after the reconnect")
            assert await next_message(again) == "after the reconnect"
        assert (await connections(coord)).get("hub") == 1
    finally:
        await coord.close()


class GatedListener:
    """A listener whose SUBSCRIBE is sent at once but confirmed only when `gate` opens."""

    def __init__(self) -> None:
        self.channels: set[str] = set()
        self.sent = asyncio.Event()
        self.gate = asyncio.Event()

    async def add(self, channel: str) -> None:
        self.channels.add(channel)
        self.sent.set()
        await self.gate.wait()

    async def remove(self, channel: str) -> None:
        self.channels.discard(channel)

    async def close(self) -> None:
        self.channels.clear()


async def test_a_waiter_cancelled_while_subscribing_leaves_no_subscription() -> None:
    """Cancelled between sending SUBSCRIBE and its confirmation: the hub unsubscribes, and a
    waiter queued behind it subscribes again."""
    listener = GatedListener()

    async def open_listener(deliver: Deliver, lost: Lost) -> Listener:
        return listener

    hub = Hub(open_listener)
    entering = asyncio.create_task(hub.subscribe("c").__aenter__())
    await asyncio.wait_for(listener.sent.wait(), DEADLINE)
    entering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await entering
    assert listener.channels == set() and hub.channels == 0

    listener.gate.set()
    async with hub.subscribe("c"):
        assert listener.channels == {"c"}
    assert listener.channels == set() and hub.channels == 0
    await hub.close()
