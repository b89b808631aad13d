"""`notifications/tools/list_changed` from the gateway (`/mcp`), with the SDK's own client of
both eras against the real app on loopback: a handshake-era session's standing GET stream
and a 2026-07-28 `subscriptions/listen` stream each hear that their org's catalog changed
(a workflow published, an upstream server added, edited, removed) — also when the change
was made on another replica (two runtimes on one Redis) — and nothing of another org's;
every answer of `/mcp` is marked private for HTTP caches."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client

from ator import Ator
from ator.api.app import create_app
from ator.coord.catalog import catalog_channel
from ator.engine.mcp import McpServers
from ator.gateway import McpGateway
from ator.workflows import Workflows
from tests.conftest import REDIS_URL, drop_keys
from tests.mcp_servers import serve_app
from tests.test_gateway import Org, _org

RECIPE = {"schema": "ator.workflow/v1",
          "steps": [{"id": "one", "type": "transform", "expr": "1"}]}
DEADLINE = 20.0


class Heard:
    """The `list_changed` notifications a handshake-era client received."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()

    async def __call__(self, message: Any) -> None:
        method = getattr(message, "method", None)
        if method is not None:
            await self.queue.put(method)

    async def next(self) -> str:
        async with asyncio.timeout(DEADLINE):
            return await self.queue.get()


async def _served(ator: Ator) -> AsyncIterator[tuple[str, McpGateway]]:
    app = create_app(ator.settings, runtime=ator)
    async with serve_app(app) as port:
        yield f"http://127.0.0.1:{port}/mcp", app.state.mcp_gateway


@pytest.fixture
async def one(make_ator: Any) -> AsyncIterator[tuple[Ator, str, McpGateway]]:
    async with make_ator(rate_limit_per_minute=1000, egress_allow=("127.0.0.1",)) as ator:
        async for url, gateway in _served(ator):
            yield ator, url, gateway


async def _publish(ator: Ator, org: Org, name: str) -> None:
    flows = ator.service(Workflows)
    row = await flows.create(org.scope, name)
    await flows.publish(org.scope, row["id"], RECIPE)


def _http(key: str) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)


async def test_a_handshake_session_hears_each_change_of_its_orgs_catalog_only(
        one: tuple[Ator, str, McpGateway]) -> None:
    ator, url, gateway = one
    org, other = await _org(ator), await _org(ator)
    heard = Heard()
    async with _http(org.admin) as http, \
            Client(streamable_http_client(url, http_client=http), mode="legacy",
                   message_handler=heard) as client:
        caps = client.session.initialize_result.capabilities
        assert caps.tools is not None and caps.tools.list_changed is True
        async with asyncio.timeout(DEADLINE):
            # its GET stream is live
            await gateway.changes.wait_streams(org.scope.org_id, lambda n: n >= 1)
        # Nobody on any replica listens to the other org's changes.
        assert await ator.coord.publish(catalog_channel(other.scope.org_id), "x") == 0
        await _publish(ator, org, "first")
        assert await heard.next() == "notifications/tools/list_changed"
        assert "workflow__first" in {t.name for t in (await client.list_tools()).tools}
        servers = ator.service(McpServers)
        made = await servers.create_mcp_server(org.scope, name="up",
                                               url="http://127.0.0.1:9/mcp")
        assert await heard.next() == "notifications/tools/list_changed"
        await servers.update_mcp_server(org.scope, made.id, enabled=False)
        assert await heard.next() == "notifications/tools/list_changed"
        await servers.delete_mcp_server(org.scope, made.id)
        assert await heard.next() == "notifications/tools/list_changed"
    async with asyncio.timeout(DEADLINE):  # the client left: its stream ended here too
        await gateway.changes.wait_streams(org.scope.org_id, lambda n: n == 0)


async def test_a_2026_client_listening_hears_a_change_and_another_org_hears_nothing(
        one: tuple[Ator, str, McpGateway]) -> None:
    ator, url, gateway = one
    org, other = await _org(ator), await _org(ator)
    async with _http(org.admin) as http, \
            Client(streamable_http_client(url, http_client=http), mode="auto") as client, \
            client.listen(tools_list_changed=True) as sub:
        assert sub.honored.tools_list_changed is True
        assert gateway.changes.streams(other.scope.org_id) == 0
        await _publish(ator, org, "second")
        async with asyncio.timeout(DEADLINE):
            event = await anext(aiter(sub))
        assert type(event).__name__ == "ToolsListChanged"
        assert "workflow__second" in {t.name for t in (await client.list_tools()).tools}


@pytest.mark.redis
async def test_a_change_made_on_another_replica_reaches_the_client(make_ator: Any) -> None:
    prefix = f"ator-test:{uuid.uuid4().hex}:"
    shared = {"redis_url": REDIS_URL, "redis_prefix": prefix, "rate_limit_per_minute": 1000}
    try:
        async with make_ator(owner_id="r1", **shared) as first, \
                make_ator(owner_id="r2", **shared) as second:
            async for url, gateway in _served(first):
                org = await _org(first)
                heard = Heard()
                async with _http(org.admin) as http, \
                        Client(streamable_http_client(url, http_client=http), mode="legacy",
                               message_handler=heard) as legacy, \
                        _http(org.admin) as http2, \
                        Client(streamable_http_client(url, http_client=http2),
                               mode="auto") as modern, \
                        modern.listen(tools_list_changed=True) as sub:
                    async with asyncio.timeout(DEADLINE):
                        await gateway.changes.wait_streams(org.scope.org_id, lambda n: n >= 2)
                    await _publish(second, org, "elsewhere")  # on the other replica
                    assert await heard.next() == "notifications/tools/list_changed"
                    async with asyncio.timeout(DEADLINE):
                        assert type(await anext(aiter(sub))).__name__ == "ToolsListChanged"
                    assert "workflow__elsewhere" in {
                        t.name for t in (await legacy.list_tools()).tools}
    finally:
        await drop_keys(prefix)


async def test_every_answer_is_private_to_its_key(one: tuple[Ator, str, McpGateway]) -> None:
    ator, url, _ = one
    org = await _org(ator)
    envelope = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}}
    async with httpx.AsyncClient(timeout=30) as http:
        for version, params in (("2026-07-28", {"_meta": envelope}), ("2025-06-18", {})):
            got = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                             "params": params}, headers={
                "Authorization": f"Bearer {org.admin}", "MCP-Protocol-Version": version,
                "Mcp-Method": "tools/list", "Accept": "application/json, text/event-stream"})
            assert got.status_code == 200, got.text
            assert got.json()["result"]["tools"]
            if version.startswith("2026"):  # the era's own hint, never "public"
                assert got.json()["result"]["cacheScope"] == "private"
                assert got.json()["result"]["ttlMs"] == 0
            assert "private" in got.headers["cache-control"]
            assert "no-store" in got.headers["cache-control"]
            assert "authorization" in got.headers["vary"].lower()
