"""The Redis Coordinator, shared by many replicas (layer: coord; imports redis, ator.errors,
coord.base).

This is the boundary for redis-py: every `redis.exceptions.RedisError` (ConnectionError,
TimeoutError, ...) leaving this module has been mapped to `CoordinationError`, once, here.

Keys are `<prefix>lease:<key>`, `<prefix>mark:<key>` and `<prefix>hit:<key>:<window no>`;
channels are `<prefix><channel>`. Pub/sub ignores the database number, so two deployments
sharing a Redis server must differ in prefix, not just in db.

Lease ownership is decided inside Redis by small Lua scripts (acquire-or-refresh,
compare-and-pexpire, compare-and-delete), so two replicas can never both believe they hold
a lease that Redis says is one token's.

Connections come from separate, bounded pools, so what tenants' requests drive cannot starve
what keeps turns alive: `coord` (leases, heartbeats, marks, publishes, the abort listener's
and the readiness ping) and `requests` (rate-limit counters, lease lookups for busy/stop).
A pool that is exhausted makes a caller wait at most `pool_timeout`, then fail with
CoordinationError. Subscriptions of `subscribe()` each hold a connection of their own (the
engine's few long-lived listeners); the hub (coord.fanout) holds exactly one for every
waiter of the process. Connections are named `<prefix>coord`, `<prefix>requests`,
`<prefix>pubsub` and `<prefix>hub` (CLIENT LIST shows who holds what).

Each pool's commands have one round trip out at a time (`_Batched`, one per pool): what is
sent meanwhile goes as one pipeline once it is back, so a burst of turns (publishes, lease
scripts) or of requests (rate-limit counts, lease lookups) costs a round trip per pipeline,
not per command, and never queues on the pool itself: a burst of 500 requests on a pool of 8
waited for connections in turn and, on a loaded machine, past `pool_timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, cast

from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.client import PubSub
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, NoScriptError, RedisError

from ator.coord.base import Deliver, Listener, Lost, Subscription
from ator.coord.fanout import Hub
from ator.errors import ConfigError, CoordinationError

__all__ = ["RedisCoordinator"]

# SET NX first: the common case (free lease) is one command. If taken, refresh only when it
# is ours, so a retried acquire after a lost reply cannot fail against ourselves.
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# A pump's start and end, one round trip each (see Coordinator.claim and
# release_unless_marked). KEYS: the lease, the mark.
_CLAIM = """
local taken = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not taken then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1 + redis.call('DEL', KEYS[2])
"""
_RELEASE_UNLESS_MARKED = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('DEL', KEYS[2]) == 1 then return 1 end
redis.call('DEL', KEYS[1])
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# A rate-limit count: one script, so it can queue in a pipeline like any other command.
_HIT = """
local count = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return count
"""


class _MapRedisErrors:
    """`with _map_errors:` turns redis-py errors into CoordinationError; others pass."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, RedisError):
            raise CoordinationError(f"redis: {type(exc).__name__}: {exc}") from exc


_map_errors = _MapRedisErrors()  # stateless, so one instance serves every call


def _millis(seconds: float, what: str) -> int:
    if not seconds > 0:  # also rejects NaN
        raise ValueError(f"{what} must be positive, got {seconds!r}")
    return max(1, math.ceil(seconds * 1000))


class _RedisSubscription:
    """One pubsub connection; a reader task moves messages into an inbox queue.

    The reader is ours, so close() can stop it cleanly: UNSUBSCRIBE, let the reader drain up
    to the server's last unsubscribe confirmation, and only cancel it if that takes longer
    than the coordinator's timeout (e.g. the server is gone).
    """

    def __init__(self, owner: RedisCoordinator, channels: tuple[str, ...]) -> None:
        self._owner = owner
        self._channels = channels  # prefixed
        # Items: a message; None = end; an exception = the reader failed (raised to readers).
        # Ends and failures are put back when seen so every iterator stops.
        self._queue: asyncio.Queue[tuple[str, str] | BaseException | None] = asyncio.Queue()
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    async def __aenter__(self) -> Subscription:
        if self._closed or self._pubsub is not None:
            raise RuntimeError("a subscription can be entered once")
        owner = self._owner
        pubsub = owner._pubsub_client.pubsub()
        self._pubsub = pubsub
        owner._subscriptions.add(self)
        try:
            with _map_errors:
                await pubsub.subscribe(*self._channels)
                await self._confirmed(pubsub)
        except BaseException:
            await self.close()
            raise
        self._reader = asyncio.create_task(self._read(pubsub), name="ator-redis-subscription")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _confirmed(self, pubsub: PubSub) -> None:
        # redis-py's subscribe() only writes the command. Until the server's confirmation
        # for every channel is read, a PUBLISH from another connection may still beat it.
        pending = set(self._channels)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._owner._timeout
        while pending:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise CoordinationError("redis: SUBSCRIBE was not confirmed in time")
            message = await pubsub.get_message(timeout=remaining)
            if message is not None:
                self._accept(message)
                if message["type"] == "subscribe":
                    pending.discard(message["channel"])

    def _accept(self, message: dict[str, Any]) -> None:
        if message["type"] == "message":
            channel: str = message["channel"]
            data: str = message["data"]
            self._queue.put_nowait((channel[len(self._owner._prefix) :], data))

    async def _read(self, pubsub: PubSub) -> None:
        try:
            while True:
                message = await pubsub.get_message(timeout=None)
                if message is None:
                    continue
                self._accept(message)
                # After close() sent UNSUBSCRIBE, the last confirmation reports 0 channels.
                if message["type"] == "unsubscribe" and message["data"] == 0:
                    return
        except RedisError as exc:
            # redis-py already retried and resubscribed; this is final. Hand it to readers.
            error = CoordinationError(f"redis: subscription lost: {exc}")
            error.__cause__ = exc
            self._queue.put_nowait(error)
        except Exception as exc:  # a bug here must reach whoever iterates, not vanish
            self._queue.put_nowait(exc)

    async def __aiter__(self) -> AsyncIterator[tuple[str, str]]:
        while True:
            item = await self._queue.get()
            if isinstance(item, tuple):
                yield item
                continue
            self._queue.put_nowait(item)
            if item is None:
                return
            raise item

    async def close(self) -> None:
        """Unsubscribe and close the pubsub connection; iterators get what was already
        received, then stop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._owner._subscriptions.discard(self)
        pubsub, reader = self._pubsub, self._reader
        try:
            if pubsub is not None and reader is not None and not reader.done():
                await self._stop_reader(pubsub, reader)
        finally:
            if reader is not None and not reader.done():
                reader.cancel()
                await asyncio.wait({reader})
            self._queue.put_nowait(None)
            if pubsub is not None:
                with _map_errors:
                    await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # redis < 8.2 leaves it unannotated

    async def _stop_reader(self, pubsub: PubSub, reader: asyncio.Task[None]) -> None:
        try:
            async with asyncio.timeout(self._owner._timeout):
                await pubsub.unsubscribe()
        except (RedisError, TimeoutError):
            return  # the connection is unusable; close() cancels the reader instead
        await asyncio.wait({reader}, timeout=self._owner._timeout)


class _RedisListener:
    """The hub's one pubsub connection; channels are added and removed while it lives.

    It always stays subscribed to a private channel of its own, so the connection is never
    in redis-py's "not subscribed" state and the reader can simply block. `add` waits for the
    server's confirmation (matched in order per channel), so a message published after `add`
    returned is delivered."""

    def __init__(self, owner: RedisCoordinator, deliver: Deliver, lost: Lost) -> None:
        self._owner = owner
        self._deliver = deliver
        self._lost = lost
        self._pubsub: PubSub = owner._hub_client.pubsub()
        self._own = f"{owner._prefix}hub:{uuid.uuid4().hex}"
        self._confirming: dict[str, deque[asyncio.Future[None]]] = {}
        self._writing = asyncio.Lock()  # one command at a time on the shared connection
        self._reader: asyncio.Task[None] | None = None
        self._closed = False

    async def start(self) -> None:
        try:
            with _map_errors:
                await self._pubsub.subscribe(self._own)
                async with asyncio.timeout(self._owner._timeout):
                    while True:  # the first confirmation: ours, nobody else's can come first
                        message = await self._pubsub.get_message(timeout=self._owner._timeout)
                        if message is not None and message["type"] == "subscribe":
                            break
        except TimeoutError as exc:
            await self.close()
            raise CoordinationError("redis: SUBSCRIBE was not confirmed in time") from exc
        except BaseException:
            await self.close()
            raise
        self._reader = asyncio.create_task(self._read(), name="ator-redis-hub")

    async def add(self, channel: str) -> None:
        if self._closed:
            raise CoordinationError("redis: the hub's connection is closed")
        prefixed = self._owner._prefix + channel
        confirmed = asyncio.get_running_loop().create_future()
        self._confirming.setdefault(prefixed, deque()).append(confirmed)
        try:
            async with self._writing:
                with _map_errors:
                    await self._pubsub.subscribe(prefixed)
            async with asyncio.timeout(self._owner._timeout):
                await confirmed
        except TimeoutError as exc:
            raise CoordinationError("redis: SUBSCRIBE was not confirmed in time") from exc
        finally:
            pending = self._confirming.get(prefixed)
            if pending is not None and confirmed in pending:
                pending.remove(confirmed)
                if not pending:
                    del self._confirming[prefixed]

    async def remove(self, channel: str) -> None:
        if self._closed:
            return
        async with self._writing:
            with _map_errors:
                await self._pubsub.unsubscribe(self._owner._prefix + channel)

    async def _read(self) -> None:
        prefix = len(self._owner._prefix)
        try:
            while True:
                message = await self._pubsub.get_message(timeout=None)
                if message is None:
                    continue
                kind, channel = message["type"], message["channel"]
                if kind == "message" and channel != self._own:
                    self._deliver(channel[prefix:], message["data"])
                elif kind == "subscribe":
                    # After a reconnect redis-py resubscribes: confirmations nobody awaits.
                    pending = self._confirming.get(channel)
                    if pending:
                        waiting = pending.popleft()
                        if not waiting.done():
                            waiting.set_result(None)
        except RedisError as exc:
            # redis-py already retried and resubscribed; this is final.
            error = CoordinationError(f"redis: the hub's subscription was lost: {exc}")
            error.__cause__ = exc
            self._fail(error)
        except Exception as exc:  # a bug here must reach the waiters, not vanish
            self._fail(exc)

    def _fail(self, error: BaseException) -> None:
        for pending in self._confirming.values():
            for waiting in pending:
                if not waiting.done():
                    waiting.set_exception(error)
        self._lost(error)
        self._closed = True
        # The connection itself is released by close(), which the coordinator calls.
        self._owner._dead_listeners.add(self)

    async def close(self) -> None:
        """Stop the reader and close the connection. Idempotent."""
        self._closed = True
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            await asyncio.wait({reader})
        with _map_errors:
            await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # redis < 8.2 leaves it unannotated


class _Batched:
    """One pool's small commands, one round trip out at a time.

    They are small commands, and under a burst a thousand turns send them at once: a round
    trip each costs redis-py's pool and connection bookkeeping every time (~0.1 ms of CPU
    per command here). A command sent while none is out goes alone, as before. One sent
    while another is out is queued; when the reply comes, whatever queued meanwhile goes as
    one pipeline (no MULTI), and each caller gets its own reply (an error to it alone). So
    a lone command waits for nothing, and a burst costs a round trip per pipeline instead
    of per command. Commands keep the order they were queued in.

    A lease script goes as EVALSHA; after a Redis restart or flush the server may not know
    it yet, and then that command is run again on its own, loading the script."""

    def __init__(self, client: Redis) -> None:
        self._client = client
        self._queued: list[tuple[tuple[Any, ...], AsyncScript | None,
                                 asyncio.Future[Any]]] = []
        self._sender: asyncio.Task[None] | None = None
        self._busy = False  # a round trip of ours is out (a caller's own, or a pipeline)

    async def run(self, *command: Any) -> Any:
        return await self._queue(command, None)

    async def script(self, script: AsyncScript, keys: list[str], args: tuple[Any, ...]) -> Any:
        return await self._queue(("EVALSHA", script.sha, len(keys), *keys, *args), script)

    async def _queue(self, command: tuple[Any, ...], script: AsyncScript | None) -> Any:
        if self._busy:  # a round trip is out: this one goes with the next pipeline
            reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._queued.append((command, script, reply))
            return await reply
        self._busy = True  # nothing out: this caller sends its own, as one command
        try:
            return await self._one(command, script)
        finally:
            if self._queued:
                self._sender = asyncio.get_running_loop().create_task(
                    self._send(), name="ator-redis-batch")
            else:
                self._busy = False

    async def _one(self, command: tuple[Any, ...], script: AsyncScript | None) -> Any:
        try:
            return await self._client.execute_command(*command)  # type: ignore[no-untyped-call]
        except NoScriptError:
            if script is None:
                raise
            await self._client.script_load(script.script)
            return await self._client.execute_command(*command)  # type: ignore[no-untyped-call]

    async def _send(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                try:
                    async with self._client.pipeline(transaction=False) as pipe:
                        for command, _, _ in batch:
                            pipe.execute_command(*command)
                        replies = await pipe.execute(raise_on_error=False)
                except Exception as exc:  # the connection failed: every caller hears it
                    for _, _, reply in batch:
                        if not reply.done():
                            reply.set_exception(exc)
                    continue
                for (command, script, reply), got in zip(batch, replies, strict=True):
                    if isinstance(got, NoScriptError) and script is not None:
                        try:
                            got = await self._one(command, script)
                        except Exception as exc:
                            got = exc
                    if reply.done():  # its caller was cancelled
                        continue
                    if isinstance(got, BaseException):
                        reply.set_exception(got)
                    else:
                        reply.set_result(got)
        finally:
            self._sender = None
            self._busy = False
            failed, self._queued = self._queued, []  # left only when cancelled (closing)
            for _, _, reply in failed:
                if not reply.done():
                    reply.set_exception(ConnectionError("the coordinator is closing"))

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sender


class RedisCoordinator:
    """Coordinator over Redis (`redis://` or `rediss://` URL), for many replicas.

    `timeout` bounds connecting, each command, and waiting for SUBSCRIBE confirmations.
    `pool_size` and `request_pool_size` bound the `coord` and `requests` pools; waiting for
    a connection of either takes at most `pool_timeout` seconds.
    Raises ConfigError for a URL redis-py cannot parse; every method raises
    CoordinationError when Redis fails (except `ping`, which answers False).
    """

    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "ator:",
        timeout: float = 5.0,
        pool_size: int = 32,
        request_pool_size: int = 32,
        pool_timeout: float = 2.0,
    ) -> None:
        options: dict[str, Any] = {
            "decode_responses": True,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
        }
        try:
            self._client = Redis.from_pool(BlockingConnectionPool.from_url(
                url, max_connections=pool_size, timeout=pool_timeout,
                client_name=f"{prefix}coord", **options))
            self._requests = Redis.from_pool(BlockingConnectionPool.from_url(
                url, max_connections=request_pool_size, timeout=pool_timeout,
                client_name=f"{prefix}requests", **options))
            # Dedicated subscriptions: as many as the engine opens (a handful per process).
            self._pubsub_client = Redis.from_pool(ConnectionPool.from_url(
                url, client_name=f"{prefix}pubsub", **options))
            self._hub_client = Redis.from_pool(ConnectionPool.from_url(
                url, client_name=f"{prefix}hub", **options))
        except ValueError as exc:
            raise ConfigError(f"invalid Redis URL: {exc}") from exc
        self._prefix = prefix
        self._timeout = timeout
        self._subscriptions: set[_RedisSubscription] = set()
        self._dead_listeners: set[_RedisListener] = set()
        self.hub = Hub(self.listen)
        # register_script only hashes the text; the first call loads it into the server.
        self._batched = _Batched(self._client)
        self._batched_requests = _Batched(self._requests)
        self._acquire = self._client.register_script(_ACQUIRE)
        self._extend = self._client.register_script(_EXTEND)
        self._release = self._client.register_script(_RELEASE)
        self._claim = self._client.register_script(_CLAIM)
        self._release_unless_marked = self._client.register_script(_RELEASE_UNLESS_MARKED)
        self._hit = self._requests.register_script(_HIT)

    # -- leases -----------------------------------------------------------------------------

    async def acquire(self, key: str, token: str, ttl: float) -> bool:
        """Take `key` for `token` if free or already ours (then the ttl restarts)."""
        args = (token, _millis(ttl, "ttl"))
        with _map_errors:
            return bool(await self._batched.script(self._acquire, [self._prefix + "lease:" + key],
                                                   args))

    async def extend(self, key: str, token: str, ttl: float) -> bool:
        """Restart the lease's ttl from now; False if `token` no longer holds it."""
        args = (token, _millis(ttl, "ttl"))
        with _map_errors:
            return bool(await self._batched.script(self._extend, [self._prefix + "lease:" + key],
                                                   args))

    async def release(self, key: str, token: str) -> bool:
        with _map_errors:
            return bool(await self._batched.script(self._release, [self._prefix + "lease:" + key],
                                                   (token,)))

    async def claim(self, key: str, token: str, ttl: float, mark: str) -> tuple[bool, bool]:
        keys = [self._prefix + "lease:" + key, self._prefix + "mark:" + mark]
        with _map_errors:
            got = int(await self._batched.script(self._claim, keys, (token, _millis(ttl, "ttl"))))
        return got > 0, got > 1

    async def release_unless_marked(self, key: str, token: str, mark: str) -> bool:
        keys = [self._prefix + "lease:" + key, self._prefix + "mark:" + mark]
        with _map_errors:
            return bool(await self._batched.script(self._release_unless_marked, keys, (token,)))

    async def holder(self, key: str) -> str | None:
        with _map_errors:
            token = await self._batched_requests.run("GET", self._prefix + "lease:" + key)
        return cast("str | None", token)  # decode_responses=True: never bytes

    # -- pub/sub ----------------------------------------------------------------------------

    async def publish(self, channel: str, message: str) -> int:
        with _map_errors:
            return int(await self._batched.run("PUBLISH", self._prefix + channel, message))

    def subscribe(self, *channels: str) -> _RedisSubscription:
        """Subscribe to `channels`. Entering returns once Redis confirmed the SUBSCRIBE, so
        nothing published after that is missed. Raises CoordinationError on entering."""
        if not channels:
            raise ValueError("subscribe needs at least one channel")
        prefixed = tuple(dict.fromkeys(self._prefix + channel for channel in channels))
        return _RedisSubscription(self, prefixed)

    async def listen(self, deliver: Deliver, lost: Lost) -> Listener:
        """Open the hub's connection (see `_RedisListener`). Raises CoordinationError."""
        for dead in list(self._dead_listeners):  # connections of listeners that failed
            self._dead_listeners.discard(dead)
            with contextlib.suppress(CoordinationError):  # already broken: best effort
                await dead.close()
        listener = _RedisListener(self, deliver, lost)
        await listener.start()
        return listener

    # -- marks and counters -----------------------------------------------------------------

    async def mark(self, key: str, ttl: float) -> None:
        with _map_errors:
            await self._client.set(self._prefix + "mark:" + key, "1", px=_millis(ttl, "ttl"))

    async def take_mark(self, key: str) -> bool:
        with _map_errors:
            removed: int = await self._client.delete(self._prefix + "mark:" + key)
        return removed > 0

    async def hit(self, key: str, window: float) -> int:
        """Count one event in the window `floor(wall time / window)`; returns the count so
        far. Wall time, not monotonic: every replica must agree on the window number."""
        window_ms = _millis(window, "window")
        number = math.floor(time.time() / window)
        name = f"{self._prefix}hit:{key}:{number}"
        with _map_errors:
            return int(await self._batched_requests.script(self._hit, [name], (window_ms,)))

    # -- lifecycle --------------------------------------------------------------------------

    async def ping(self) -> bool:
        """True if Redis answers; False (never an exception) if it cannot be reached."""
        try:
            return bool(await self._client.ping())
        except RedisError:
            return False

    async def close(self) -> None:
        """Close the hub and live subscriptions, then the clients and their pools."""
        try:
            await self._batched.close()
            await self._batched_requests.close()
            await self.hub.close()
            for subscription in list(self._subscriptions):
                await subscription.close()
            for dead in list(self._dead_listeners):
                await dead.close()
        finally:
            with _map_errors:
                for client in (self._client, self._requests, self._pubsub_client,
                               self._hub_client):
                    await client.aclose()
