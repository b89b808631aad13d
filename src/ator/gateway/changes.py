"""`notifications/tools/list_changed` to the gateway's clients, on any replica (layer: gateway;
imports mcp, coord, gateway.sessions).

A change of an org's catalog (an upstream server added, edited, removed or re-tested, a
workflow version published) is announced on the coordinator by the service that made it
(`coord/catalog.py`); every replica subscribes the org's channel for as long as one of its
clients listens (the coordinator's shared hub: one connection per process, however many
clients), so a client hears of a change made through any replica:

- handshake era: the client's `GET /mcp` with its `Mcp-Session-Id` is answered here (the
  SDK's stateless server has no standing stream) with an SSE stream that carries one
  `notifications/tools/list_changed` per change; while it is open the session stays alive
  (a heartbeat comment every `heartbeat` seconds renews it) and it ends when the session
  ends (DELETE on any replica, expiry), the client leaves, or the gateway closes;
- 2026-07-28: `subscriptions/listen` (the era's only server-to-client channel) is served by
  the SDK's `ListenHandler` over a bus of this stream's own, fed from the org's channel —
  never a bus shared between tenants.

Several changes arriving together are told once (a list is re-read whole anyway). A client
may hold `per_org` streams per org on one replica at most (further ones: 429 / -32000).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any
from uuid import UUID

from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import SubscriptionsListenRequestParams, SubscriptionsListenResult
from starlette.types import Receive, Send

from ator.coord.base import Coordinator
from ator.coord.catalog import catalog_channel
from ator.coord.fanout import Waiter

__all__ = ["LIST_CHANGED", "CatalogChanges", "StreamsFull"]

LIST_CHANGED = (b'event: message\ndata: {"jsonrpc":"2.0",'
                b'"method":"notifications/tools/list_changed"}\n\n')
_SSE_HEADERS = [(b"content-type", b"text/event-stream"),
                (b"cache-control", b"no-store, private"), (b"x-accel-buffering", b"no")]


class StreamsFull(Exception):
    """The org holds its cap of open change streams on this replica."""


class CatalogChanges:
    def __init__(self, coord: Coordinator, *, heartbeat: float = 15.0, per_org: int = 64,
                 forget: Sequence[Callable[[UUID], None]] = ()) -> None:
        """`forget`: what to drop of an org's cached catalog when a change is heard, before
        the client is told (so the list it asks for next is the new one)."""
        self._coord = coord
        self._forget = tuple(forget)
        self._heartbeat = heartbeat
        self._per_org = per_org
        self._open: Counter[UUID] = Counter()
        self._changed = asyncio.Condition()
        self.closing = asyncio.Event()

    def streams(self, org_id: UUID) -> int:
        """Change streams the org holds open (subscribed) on this replica."""
        return self._open[org_id]

    async def wait_streams(self, org_id: UUID, ready: Callable[[int], bool]) -> None:
        """Return once `ready(n)` holds for the org's `n` subscribed streams here."""
        async with self._changed:
            await self._changed.wait_for(lambda: ready(self._open[org_id]))

    async def _count(self, org_id: UUID, delta: int) -> None:
        async with self._changed:
            self._open[org_id] += delta
            if not self._open[org_id]:
                del self._open[org_id]
            self._changed.notify_all()

    @contextlib.asynccontextmanager
    async def _subscribed(self, org_id: UUID) -> AsyncIterator[Waiter]:
        if self._open[org_id] >= self._per_org:
            raise StreamsFull(f"this org has {self._per_org} change streams open")
        async with self._coord.hub.subscribe(catalog_channel(org_id), inbox=16) as waiter:
            await self._count(org_id, 1)
            try:
                yield waiter
            finally:
                await asyncio.shield(self._count(org_id, -1))

    async def stream(self, org_id: UUID, receive: Receive, send: Send,
                     alive: Callable[[], Awaitable[bool]]) -> None:
        """The handshake era's standing stream (GET): one SSE `list_changed` per change,
        until the client leaves, `alive()` says the session ended, or the gateway closes.
        Raises StreamsFull before anything is sent."""
        async with self._subscribed(org_id) as waiter:
            await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await send({"type": "http.response.body", "body": b": open\n\n", "more_body": True})
            tasks = [asyncio.create_task(self._pump(org_id, waiter, send, alive)),
                     asyncio.create_task(_left(receive)),
                     asyncio.create_task(self.closing.wait())]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(OSError):  # the client may be gone already
                await send({"type": "http.response.body", "body": b""})

    def heard(self, org_id: UUID) -> None:
        """A change of the org's catalog was heard on this replica."""
        for forget in self._forget:
            forget(org_id)

    async def _pump(self, org_id: UUID, waiter: Waiter, send: Send,
                    alive: Callable[[], Awaitable[bool]]) -> None:
        while True:
            message = await waiter.get(self._heartbeat)
            if message is None:  # quiet: keep the session alive while the client listens
                if not await alive():
                    return
                await send({"type": "http.response.body", "body": b": keep-alive\n\n",
                            "more_body": True})
                continue
            while await waiter.get(0) is not None:  # several at once: told once
                pass
            self.heard(org_id)
            await send({"type": "http.response.body", "body": LIST_CHANGED, "more_body": True})

    async def listen(self, org_id: UUID, ctx: ServerRequestContext[Any, Any],
                     params: SubscriptionsListenRequestParams) -> SubscriptionsListenResult:
        """2026-07-28 `subscriptions/listen`: the SDK's handler over this stream's own bus."""
        bus = InMemorySubscriptionBus()
        try:
            async with self._subscribed(org_id) as waiter:
                feed = asyncio.create_task(self._feed(org_id, waiter, bus))
                try:
                    return await ListenHandler(bus, max_subscriptions=1)(ctx, params)
                finally:
                    feed.cancel()
                    await asyncio.gather(feed, return_exceptions=True)
        except StreamsFull as exc:
            raise MCPError(-32000, str(exc), data={"code": "rate_limited"}) from None


    async def _feed(self, org_id: UUID, waiter: Waiter, bus: InMemorySubscriptionBus
                    ) -> None:
        while True:
            if await waiter.get() is None:
                continue
            while await waiter.get(0) is not None:
                pass
            self.heard(org_id)
            await bus.publish(ToolsListChanged())


async def _left(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
