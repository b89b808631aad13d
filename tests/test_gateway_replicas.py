"""Any replica serves any gateway session: two runtimes on one database and one Redis, each
served by uvicorn, behind a test load balancer that alternates every request (no sticky
sessions). A handshake-era session's 20 consecutive calls all succeed, and so do a
2026-07-28 client's; a session ended (DELETE) on one replica is gone on the other."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from ator.api.app import create_app
from tests.conftest import REDIS_URL, drop_keys
from tests.mcp_servers import serve_app
from tests.test_gateway import _client, _org, _text

pytestmark = pytest.mark.redis


class Alternating:
    """A plain load balancer: each request to the next backend in turn, streamed through."""

    def __init__(self, backends: list[str]) -> None:
        self._next = itertools.cycle(range(len(backends)))
        self.backends = backends
        self.served = [0] * len(backends)
        self._http = httpx.AsyncClient(timeout=30)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        index = next(self._next)
        self.served[index] += 1
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k != b"host"]
        request = self._http.build_request(scope["method"], self.backends[index] + scope["path"],
                                           headers=headers, content=body)
        response = await self._http.send(request, stream=True)
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k.encode(), v.encode())
                                    for k, v in response.headers.multi_items()
                                    if k.lower() not in ("content-length", "transfer-encoding")]})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()


@asynccontextmanager
async def _replicas(make_ator: Any) -> AsyncIterator[tuple[str, Alternating, Any]]:
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    shared = {"redis_url": REDIS_URL, "redis_prefix": prefix, "rate_limit_per_minute": 1000}
    try:
        async with make_ator(owner_id="r1", **shared) as one, \
                make_ator(owner_id="r2", **shared) as two, \
                serve_app(create_app(one.settings, runtime=one)) as p1, \
                serve_app(create_app(two.settings, runtime=two)) as p2:
            balancer = Alternating([f"http://127.0.0.1:{p1}", f"http://127.0.0.1:{p2}"])
            try:
                async with serve_app(balancer) as port:
                    yield f"http://127.0.0.1:{port}/mcp", balancer, one
            finally:
                await balancer.aclose()
    finally:
        await drop_keys(prefix)


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_twenty_calls_of_one_client_alternating_between_replicas_all_succeed(
        make_ator: Any, era: str) -> None:
    async with _replicas(make_ator) as (url, balancer, ator):
        org = await _org(ator)
        async with _client(url, org.admin, era) as client:
            for i in range(20):
                got = await client.call_tool("calculator", {"expression": f"{i} + 1"})
                assert (_text(got), got.is_error) == (str(i + 1), False)
        assert min(balancer.served) >= 10  # both replicas served this one session


async def test_a_session_ended_on_one_replica_is_gone_on_the_other(make_ator: Any) -> None:
    async with _replicas(make_ator) as (url, balancer, ator):
        org = await _org(ator)
        auth = {"Authorization": f"Bearer {org.admin}",
                "Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=30) as http:
            opened = await http.post(url, headers=auth, json={
                "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"}}})
            session = {**auth, "mcp-session-id": opened.headers["mcp-session-id"],
                       "mcp-protocol-version": "2025-06-18"}
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
            assert (await http.post(url, headers=session, json=listing)).status_code == 200
            assert (await http.delete(url, headers=session)).status_code == 204
            for _ in range(2):  # both replicas
                gone = await http.post(url, headers=session, json=listing)
                assert gone.status_code == 404, gone.text
        assert balancer.served == [3, 2]  # initialize, DELETE, one 404 on the first
