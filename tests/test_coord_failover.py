"""A replica survives losing Redis: its stop listener resubscribes, it says it is not ready
while deaf, and a stop posted after Redis came back reaches its running turn.

The replica reaches Redis through a TCP proxy on loopback (tests/tcp_proxy.py) that the test
can cut and restore, as a network partition would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from ator.providers.base import MessageStop, ModelRequest, StreamEvent, TextDelta, Usage
from tests.conftest import REDIS_URL, ended, new_thread, wait_for_event
from tests.tcp_proxy import Proxy

pytestmark = pytest.mark.redis


class Streaming:
    name = "streaming"

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        yield TextDelta("working")
        self.entered.set()
        await asyncio.Event().wait()
        yield MessageStop("end_turn", Usage(1, 1), request.model)  # never reached


async def test_a_stop_reaches_the_turn_after_the_replica_lost_and_regained_redis(
    make_ator,
) -> None:
    target = urlsplit(REDIS_URL)
    proxy = Proxy(target.hostname or "127.0.0.1", target.port or 6379)
    await proxy.start()
    proxied = f"redis://127.0.0.1:{proxy.port}{target.path}"
    prefix = f"ator-failover-{id(proxy)}:"
    provider = Streaming()
    async with make_ator(providers={"p": provider}, redis_url=proxied, redis_prefix=prefix,
                         lease_ttl=20.0) as owner, \
            make_ator(providers={"p": provider}, redis_url=REDIS_URL, redis_prefix=prefix,
                      engine=False) as other:
        scope, thread = await new_thread(owner, "p")
        await owner.submit(scope, thread.id, "work")
        await asyncio.wait_for(provider.entered.wait(), 10)

        await proxy.cut()
        await asyncio.wait_for(owner.actor.wait_listening(False), 15)
        assert (await owner.ready())["stop_listener"] is False

        await proxy.restore()
        await asyncio.wait_for(owner.actor.wait_listening(True), 15)
        assert (await owner.ready())["stop_listener"] is True

        await other.stop(scope, thread.id)
        end = await wait_for_event(other, scope, thread.id, ended, timeout=10)
    await proxy.cut()
    assert end.data["stop_reason"] == "cancelled:user"
