"""Coordinator contract, run against LocalCoordinator and a real Redis.

Every contract test takes `pair`: two handles on one coordination backend. For Redis they
are two RedisCoordinator instances (two replicas) sharing a random key prefix; for the local
one both are the same object, since one process has one coordinator.

Waiting is bounded: expiry is observed by polling with a deadline, never by a fixed sleep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio
from redis.exceptions import RedisError

import ator.coord
from ator.coord import (
    Coordinator,
    LocalCoordinator,
    RedisCoordinator,
    Subscription,
    coordinator_from_url,
)
from ator.errors import ConfigError, CoordinationError
from tests.conftest import REDIS_URL, Pair, drop_keys

UNREACHABLE = "redis://127.0.0.1:1/0"
DEADLINE = 5.0
SHORT = 0.2  # a ttl/window short enough to watch expire
LONG = 60.0





def key() -> str:
    return uuid.uuid4().hex


async def eventually(check: Callable[[], Awaitable[bool]], *, what: str) -> None:
    """Poll `check` until true; fail after DEADLINE seconds."""
    try:
        async with asyncio.timeout(DEADLINE):
            # Polling on purpose: a key expiring in Redis raises no event we could await.
            while not await check():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    except TimeoutError:
        pytest.fail(f"timed out waiting for {what}")


async def expired(coord: Coordinator, lease: str) -> bool:
    return await coord.holder(lease) is None


async def take(sub: Subscription, n: int) -> list[tuple[str, str]]:
    """The next `n` messages of `sub`, within DEADLINE."""
    got: list[tuple[str, str]] = []
    async with asyncio.timeout(DEADLINE):
        async for item in sub:
            got.append(item)
            if len(got) == n:
                break
    return got


# -- leases ---------------------------------------------------------------------------------


async def test_implements_protocol(pair: Pair) -> None:
    a, _ = pair
    assert isinstance(a, Coordinator)
    assert await a.ping() is True
    async with a.subscribe("x") as sub:
        assert isinstance(sub, Subscription)


async def test_acquire_is_exclusive_between_tokens(pair: Pair) -> None:
    a, b = pair
    lease = key()
    assert await a.acquire(lease, "t1", LONG) is True
    assert await b.acquire(lease, "t2", LONG) is False
    assert await b.holder(lease) == "t1"
    assert await a.holder(key()) is None


async def test_reacquire_by_same_token_succeeds_and_refreshes(pair: Pair) -> None:
    a, b = pair
    lease, witness = key(), key()
    assert await a.acquire(lease, "t1", SHORT) is True
    assert await b.acquire(lease, "t1", LONG) is True  # same token, other replica: refresh
    # `witness` is taken after the short ttl started; once it has expired, so would the
    # lease have without the refresh.
    assert await a.acquire(witness, "w", SHORT) is True
    await eventually(lambda: expired(a, witness), what="witness lease to expire")
    assert await b.holder(lease) == "t1"
    assert await b.acquire(lease, "t2", LONG) is False


async def test_expiry_lets_another_token_in(pair: Pair) -> None:
    a, b = pair
    lease = key()
    assert await a.acquire(lease, "t1", SHORT) is True
    assert await b.acquire(lease, "t2", LONG) is False
    await eventually(lambda: expired(b, lease), what="lease to expire")
    assert await b.acquire(lease, "t2", LONG) is True
    assert await a.holder(lease) == "t2"
    # The old holder lost it: it can neither extend nor release the new holder's lease.
    assert await a.extend(lease, "t1", LONG) is False
    assert await a.release(lease, "t1") is False
    assert await a.holder(lease) == "t2"


async def test_extend_only_by_holder_and_pushes_expiry(pair: Pair) -> None:
    a, b = pair
    lease, witness = key(), key()
    assert await a.extend(lease, "t1", LONG) is False  # nobody holds it
    assert await a.holder(lease) is None
    assert await a.acquire(lease, "t1", SHORT) is True
    assert await b.extend(lease, "t2", LONG) is False
    assert await b.extend(lease, "t1", LONG) is True
    assert await a.acquire(witness, "w", SHORT) is True
    await eventually(lambda: expired(a, witness), what="witness lease to expire")
    assert await a.holder(lease) == "t1"


async def test_expired_lease_cannot_be_extended(pair: Pair) -> None:
    a, b = pair
    lease, witness = key(), key()
    assert await a.acquire(lease, "t1", SHORT) is True
    assert await a.acquire(witness, "w", SHORT) is True
    await eventually(lambda: expired(a, witness), what="witness lease to expire")
    # `lease` itself is not looked at before: extend alone must notice the expiry.
    assert await b.extend(lease, "t1", LONG) is False
    assert await a.holder(lease) is None


async def test_release_only_by_holder(pair: Pair) -> None:
    a, b = pair
    lease = key()
    assert await a.release(lease, "t1") is False  # not held at all
    assert await a.acquire(lease, "t1", LONG) is True
    assert await b.release(lease, "t2") is False
    assert await b.holder(lease) == "t1"
    assert await b.release(lease, "t1") is True  # the token holds it, whichever replica asks
    assert await a.holder(lease) is None
    assert await a.release(lease, "t1") is False
    assert await b.acquire(lease, "t2", LONG) is True


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("nan")])
async def test_non_positive_ttl_is_rejected(pair: Pair, ttl: float) -> None:
    a, _ = pair
    with pytest.raises(ValueError):
        await a.acquire(key(), "t1", ttl)
    with pytest.raises(ValueError):
        await a.mark(key(), ttl)
    with pytest.raises(ValueError):
        await a.hit(key(), ttl)


# -- pub/sub --------------------------------------------------------------------------------


async def test_pubsub_delivers_in_order_to_two_subscribers(pair: Pair) -> None:
    a, b = pair
    c1, c2, other = key(), key(), key()
    async with a.subscribe(c1, c2) as both, b.subscribe(c1) as only_c1:
        sent = [(c1 if i % 3 else c2, f"m{i}") for i in range(30)]
        for channel, message in sent:
            await b.publish(channel, message)
            await a.publish(other, message)  # nobody listens there
        assert await take(both, len(sent)) == sent
        assert await take(only_c1, 20) == [item for item in sent if item[0] == c1]
        # Nothing else is queued: the next message either sees is this one.
        await a.publish(c1, "last")
        assert await take(both, 1) == [(c1, "last")]
        assert await take(only_c1, 1) == [(c1, "last")]


async def test_subscription_is_live_when_entered(pair: Pair) -> None:
    a, b = pair
    channel = key()
    # No pause between entering and publishing from the other replica: the subscribe
    # must already be confirmed, or the first messages are lost.
    for _ in range(5):
        async with a.subscribe(channel) as sub:
            await b.publish(channel, "first")
            assert await take(sub, 1) == [(channel, "first")]


async def test_close_ends_iteration_and_stops_delivery(pair: Pair) -> None:
    a, b = pair
    channel = key()
    received: list[tuple[str, str]] = []
    got_one = asyncio.Event()
    async with a.subscribe(channel) as sub:

        async def consume() -> None:
            async for item in sub:
                received.append(item)
                got_one.set()

        consumer = asyncio.create_task(consume())
        await b.publish(channel, "before")
        async with asyncio.timeout(DEADLINE):
            await got_one.wait()
        await sub.close()
        async with asyncio.timeout(DEADLINE):
            await consumer  # iteration ends on its own
        await sub.close()  # idempotent
    await b.publish(channel, "after")
    assert received == [(channel, "before")]
    assert await take(sub, 5) == []  # a closed subscription yields nothing more


async def test_coordinator_close_ends_live_subscriptions(pair: Pair) -> None:
    a, _ = pair
    async with a.subscribe(key()) as sub:
        await a.close()
        assert await take(sub, 1) == []


async def test_subscribe_needs_a_channel(pair: Pair) -> None:
    a, _ = pair
    with pytest.raises(ValueError):
        a.subscribe()


@pytest.mark.redis
async def test_redis_replicas_talk_through_pubsub() -> None:
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    one = RedisCoordinator(REDIS_URL, prefix=prefix)
    two = RedisCoordinator(REDIS_URL, prefix=prefix)
    stranger = RedisCoordinator(REDIS_URL, prefix=f"ator-test:{uuid.uuid4().hex}:")
    try:
        async with two.subscribe("wake") as sub:
            await stranger.publish("wake", "not for us")  # other prefix, other deployment
            sent = [f"m{i}" for i in range(100)]
            for message in sent:
                await one.publish("wake", message)
            assert await take(sub, len(sent)) == [("wake", m) for m in sent]
    finally:
        for coord in (one, two, stranger):
            await coord.close()


class SlowProxy:
    """TCP proxy to the test Redis that holds each client->server chunk back by `delay`.

    A subscriber behind it has its SUBSCRIBE reach the server well after a direct
    PUBLISH, unless entering the subscription waited for the server's confirmation.
    """

    def __init__(self, delay: float) -> None:
        self._delay = delay
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> SlowProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        target = urlsplit(REDIS_URL)
        user = target.netloc.rpartition("@")[0]
        self.url = urlunsplit(
            target._replace(netloc=f"{user}{'@' if user else ''}127.0.0.1:{port}")
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = urlsplit(REDIS_URL)
        up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port or 6379)
        self._writers += [writer, up_writer]
        for pump in (self._pump(reader, up_writer, self._delay), self._pump(up_reader, writer, 0)):
            task = asyncio.create_task(pump)
            self._tasks.add(task)

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
        while data := await src.read(65536):
            if delay:
                await asyncio.sleep(delay)  # simulated network latency, not a wait
            dst.write(data)
            await dst.drain()
        dst.close()


@pytest.mark.redis
async def test_redis_subscribe_returns_after_server_confirmed() -> None:
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    async with SlowProxy(delay=0.1) as proxy:
        far = RedisCoordinator(proxy.url, prefix=prefix)
        near = RedisCoordinator(REDIS_URL, prefix=prefix)
        try:
            async with far.subscribe("wake") as sub:
                await near.publish("wake", "now")
                assert await take(sub, 1) == [("wake", "now")]
        finally:
            await far.close()
            await near.close()


@pytest.mark.redis
async def test_redis_leaves_no_key_without_expiry() -> None:
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    coord = RedisCoordinator(REDIS_URL, prefix=prefix)
    raw = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        await coord.acquire(key(), "t", LONG)
        await coord.mark(key(), LONG)
        await coord.hit(key(), LONG)
        names = [name async for name in raw.scan_iter(match=prefix + "*")]
        assert len(names) == 3
        for name in names:
            assert 0 < await raw.pttl(name) <= LONG * 1000, name
    finally:
        await raw.aclose()
        await coord.close()
        await drop_keys(prefix)


# -- marks and counters ---------------------------------------------------------------------


async def test_mark_is_taken_once(pair: Pair) -> None:
    a, b = pair
    flag = key()
    assert await a.take_mark(flag) is False
    await a.mark(flag, LONG)
    await a.mark(flag, LONG)  # setting twice is still one mark
    assert await b.take_mark(flag) is True
    assert await a.take_mark(flag) is False
    await b.mark(flag, LONG)
    assert await a.take_mark(flag) is True


async def test_mark_expires(pair: Pair) -> None:
    a, b = pair
    flag, witness = key(), key()
    await a.mark(flag, SHORT)
    assert await a.acquire(witness, "w", SHORT) is True  # started after the mark
    await eventually(lambda: expired(a, witness), what="witness lease to expire")
    assert await b.take_mark(flag) is False


async def test_a_claim_takes_the_lease_and_the_mark_together(pair: Pair) -> None:
    a, b = pair
    lease, flag = key(), key()
    assert await a.claim(lease, "one", LONG, flag) == (True, False)  # free, no mark
    await b.mark(flag, LONG)
    # Held by "one": another token gets nothing, and the mark stays for the holder.
    assert await b.claim(lease, "two", LONG, flag) == (False, False)
    assert await a.claim(lease, "one", LONG, flag) == (True, True)  # ours again, mark taken
    assert await b.take_mark(flag) is False
    assert await b.holder(lease) == "one"


async def test_release_unless_marked_keeps_the_lease_for_new_work(pair: Pair) -> None:
    a, b = pair
    lease, flag = key(), key()
    assert await a.claim(lease, "one", LONG, flag) == (True, False)
    await b.mark(flag, LONG)  # a message arrived during the turn
    assert await a.release_unless_marked(lease, "one", flag) is True
    assert await b.holder(lease) == "one" and await b.take_mark(flag) is False
    assert await a.release_unless_marked(lease, "one", flag) is False  # nothing more
    assert await b.holder(lease) is None
    # Someone else's lease is never released by it, and their mark is left to them.
    assert await b.acquire(lease, "two", LONG) is True
    await b.mark(flag, LONG)
    assert await a.release_unless_marked(lease, "one", flag) is False
    assert await a.holder(lease) == "two"
    assert await b.release_unless_marked(lease, "two", flag) is True  # the holder's work


async def test_hit_counts_per_key_across_replicas(pair: Pair) -> None:
    a, b = pair
    counter, other = key(), key()
    window = 1e6  # about 11 days: a window boundary during this test is not a worry
    assert [await a.hit(counter, window) for _ in range(3)] == [1, 2, 3]
    assert await b.hit(counter, window) == 4
    assert await b.hit(other, window) == 1


async def test_hit_resets_in_a_new_window(pair: Pair) -> None:
    a, _ = pair
    counter = key()
    counts: list[int] = []

    async def reset_after_counting() -> bool:
        counts.append(await a.hit(counter, SHORT))
        return counts[-1] == 1 and max(counts) > 1

    await eventually(reset_after_counting, what="hit count to reset")
    assert counts[0] >= 1
    assert counts[-1] == 1


# -- local specifics (injected clock) -------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_local_expiry_is_exact_on_its_clock() -> None:
    clock = FakeClock()
    coord = LocalCoordinator(clock=clock)
    assert await coord.acquire("k", "t1", 10) is True
    await coord.mark("m", 10)
    clock.now += 9.999
    assert await coord.holder("k") == "t1"
    assert await coord.acquire("k", "t2", 10) is False
    clock.now += 0.001
    assert await coord.holder("k") is None
    assert await coord.take_mark("m") is False
    assert await coord.release("k", "t1") is False
    assert await coord.acquire("k", "t2", 10) is True


async def test_local_hit_windows_are_aligned() -> None:
    clock = FakeClock()
    clock.now = 19.9
    coord = LocalCoordinator(clock=clock)
    assert await coord.hit("k", 10) == 1  # window [10, 20)
    clock.now = 19.99
    assert await coord.hit("k", 10) == 2
    clock.now = 20.0
    assert await coord.hit("k", 10) == 1  # window [20, 30), not 10 s after the first hit
    clock.now = 29.99
    assert await coord.hit("k", 10) == 2


async def test_local_forgets_expired_keys_nobody_touches() -> None:
    clock = FakeClock()
    coord = LocalCoordinator(clock=clock)
    for i in range(5000):
        await coord.mark(f"m{i}", 1)
        await coord.acquire(f"l{i}", "t", 1)
    clock.now += 2
    # The sweep threshold doubles with the live size (16384 here), so it takes this many
    # new keys to trigger one; then every expired key is gone.
    for i in range(20_000):
        await coord.mark(f"n{i}", 1)
    assert not coord._leases
    assert len(coord._marks) == 20_000
    assert not any(name.startswith("m") for name in coord._marks)


# -- failures and wiring --------------------------------------------------------------------


@pytest.mark.redis
async def test_unreachable_redis_raises_coordination_error() -> None:
    coord = RedisCoordinator(UNREACHABLE, timeout=1.0)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: coord.acquire("k", "t", 1),
        lambda: coord.extend("k", "t", 1),
        lambda: coord.release("k", "t"),
        lambda: coord.holder("k"),
        lambda: coord.publish("c", "m"),
        lambda: coord.mark("k", 1),
        lambda: coord.take_mark("k"),
        lambda: coord.hit("k", 1),
    ]
    try:
        for call in calls:
            with pytest.raises(CoordinationError) as caught:
                await call()
            assert caught.value.retryable is True
            assert isinstance(caught.value.__cause__, RedisError)
        with pytest.raises(CoordinationError):
            async with coord.subscribe("c"):
                pytest.fail("entered a subscription without a server")
        assert await coord.ping() is False
    finally:
        await coord.close()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://example.invalid:6380"])
async def test_factory_picks_redis_for_redis_urls(url: str) -> None:
    coord = coordinator_from_url(url)  # connects lazily: no server needed
    try:
        assert isinstance(coord, RedisCoordinator)
        assert coord.name == "redis"
    finally:
        await coord.close()


async def test_factory_picks_local_without_url() -> None:
    coord = coordinator_from_url(None)
    assert isinstance(coord, LocalCoordinator)
    assert coord.name == "local"


@pytest.mark.parametrize("url", ["", "memcached://127.0.0.1", "127.0.0.1:6379", "redis://:x:y/z"])
def test_factory_rejects_other_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        coordinator_from_url(url)


def test_public_api() -> None:
    assert ator.coord.__all__ == [
        "Coordinator",
        "Hub",
        "Listener",
        "LocalCoordinator",
        "RedisCoordinator",
        "Subscription",
        "Waiter",
        "coordinator_from_url",
    ]


@pytest.mark.redis
async def test_an_exhausted_request_pool_waits_boundedly_and_never_starves_coordination(
) -> None:
    """Tenant-driven calls (rate-limit counters, lease lookups) have their own bounded pool:
    when it is exhausted they fail after `pool_timeout` with CoordinationError, while
    leases and the readiness ping keep working on the coordination pool."""
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    coord = RedisCoordinator(REDIS_URL, prefix=prefix, request_pool_size=1, pool_timeout=0.2)
    pool = coord._requests.connection_pool
    held = await pool.get_connection()  # what a stuck tenant request would hold
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(CoordinationError):
            await coord.hit(key(), LONG)
        assert 0.2 <= loop.time() - started < DEADLINE
        lease = key()
        assert await coord.acquire(lease, "t", LONG) is True
        assert await coord.ping() is True
        await coord.publish("x", "still flowing")
    finally:
        await pool.release(held)
        await coord.close()
        await drop_keys(prefix)


# -- one round trip out at a time (the coord pool's publishes and lease scripts) -------------


class CountingProxy:
    """A TCP proxy in front of Redis that counts the client's writes (one per round trip:
    a lone command or a whole pipeline), holding each for `delay` seconds (a slow link)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.writes = 0
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> CountingProxy:
        target = urlsplit(REDIS_URL)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       count: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if count:
                        self.writes += 1
                        await asyncio.sleep(self.delay)
                    writer.write(data)
                    await writer.drain()
            finally:
                writer.close()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_reader, up_writer = await asyncio.open_connection(target.hostname,
                                                                 target.port or 6379)
            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False),
                                 return_exceptions=True)

        self._server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = urlunsplit(target._replace(netloc=f"127.0.0.1:{port}"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()


@pytest.mark.redis
async def test_a_burst_of_publishes_and_claims_is_a_few_round_trips_each_with_its_own_reply(
) -> None:
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    async with CountingProxy() as proxy:
        coord = RedisCoordinator(proxy.url, prefix=prefix)
        listener = RedisCoordinator(REDIS_URL, prefix=prefix)
        try:
            await coord.publish("warm", "x")  # the connection's own handshake
            async with listener.subscribe("heard") as sub:
                before = proxy.writes
                heard = await asyncio.gather(*(
                    coord.publish("heard" if i % 2 else "unheard", str(i)) for i in range(200)))
                publishes = proxy.writes - before
                # Each caller has its own reply: the subscribed channel's count, or 0.
                assert heard == [1 if i % 2 else 0 for i in range(200)]
                # In the order they were sent.
                assert [m for _, m in await take(sub, 100)] == [str(i) for i in range(1, 200, 2)]
            leases = [key() for _ in range(100)]
            before = proxy.writes
            claims = await asyncio.gather(*(coord.claim(k, "t", LONG, k) for k in leases))
            claims_sent = proxy.writes - before
            assert claims == [(True, False)] * 100
            assert [await listener.holder(k) for k in leases] == ["t"] * 100
        finally:
            await coord.close()
            await listener.close()
            await drop_keys(prefix)
    # One lone command, then the rest queued behind it: a handful of round trips, not one
    # per command (the socket may split a large pipeline's write, hence the slack).
    assert publishes <= 10, publishes
    assert claims_sent <= 10, claims_sent


@pytest.mark.redis
async def test_a_burst_of_requests_on_a_small_request_pool_queues_in_pipelines_not_on_the_pool(
) -> None:
    """500 requests at once on a request pool of one connection, over a link with 20 ms
    round trips: each waiting its turn for the connection would take 10 s and fail after
    `pool_timeout` (the 503 a burst of long-polls once met). Queued behind the round trip
    that is out, they go as a few pipelines, each with its own count."""
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    async with CountingProxy(delay=0.02) as proxy:
        coord = RedisCoordinator(proxy.url, prefix=prefix, request_pool_size=1,
                                 pool_timeout=0.5)
        try:
            await coord.hit("warm", LONG)  # the connection's own handshake
            before = proxy.writes
            counts, holders = await asyncio.gather(
                asyncio.gather(*(coord.hit("burst", LONG) for _ in range(500))),
                asyncio.gather(*(coord.holder(key()) for _ in range(50))))
            sent = proxy.writes - before
            assert sorted(counts) == list(range(1, 501))
            assert holders == [None] * 50
        finally:
            await coord.close()
            await drop_keys(prefix)
    assert sent <= 10, sent


@pytest.mark.redis
async def test_an_error_in_a_pipeline_is_its_callers_alone_and_scripts_survive_a_flush() -> None:
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    coord = RedisCoordinator(REDIS_URL, prefix=prefix)
    raw = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        await raw.rpush(prefix + "lease:broken", "not a lease")  # GET on it: WRONGTYPE
        leases = [key() for _ in range(20)]
        outcomes = await asyncio.gather(
            *(coord.acquire(k, "t", LONG) for k in leases[:10]),
            coord.acquire("broken", "t", LONG),
            *(coord.acquire(k, "t", LONG) for k in leases[10:]), return_exceptions=True)
        assert isinstance(outcomes[10], CoordinationError)
        assert outcomes[:10] + outcomes[11:] == [True] * 20
        # The server forgets the lease scripts (a restart, a flush): alone or in a pipeline,
        # each is loaded again and its command runs once.
        await raw.script_flush()
        assert await coord.extend(leases[0], "t", LONG) is True
        await raw.script_flush()
        # A publish goes first, alone: the releases queue behind it and go as one pipeline.
        _, *released = await asyncio.gather(coord.publish("x", "first"),
                                            *(coord.release(k, "t") for k in leases))
        assert released == [True] * 20
        assert [await coord.holder(k) for k in leases] == [None] * 20
    finally:
        await raw.aclose()
        await coord.close()
        await drop_keys(prefix)
