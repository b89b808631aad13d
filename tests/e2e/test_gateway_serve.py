"""The MCP gateway of a real `ator serve` process (real PostgreSQL; its jobs run the workflows),
driven by the `mcp` SDK's own client of both eras, with real SDK servers upstream in this
process: an org's key lists and calls a native tool, an upstream tool of each era and a
published workflow; another org's key sees none of them and gets `unknown_tool` on their
names; a viewer's key cannot call a write tool; two downstream sessions of a stateful
upstream see separate state. Everything is set up over the HTTP API only."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from mcp.client.client import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.e2e.client import Client
from tests.e2e.conftest import Deployment, DeploymentFactory
from tests.e2e.replica import Replica
from tests.mcp_servers import counter_server, demo_server, serve_mcp

pytestmark = pytest.mark.e2e

DOUBLE = {"schema": "ator.workflow/v1",
          "input": {"type": "object", "properties": {"n": {"type": "integer"}},
                    "required": ["n"]},
          "steps": [{"id": "twice", "type": "transform", "expr": "input.n * 2"}]}


@dataclass
class Tenant:
    api: Client
    admin: str
    viewer: str


@dataclass
class Served:
    deployment: Deployment
    replica: Replica

    @property
    def mcp(self) -> str:
        return f"{self.replica.url}/mcp"


@pytest.fixture(scope="module")
async def served(deployments: DeploymentFactory) -> Served:
    deployment = deployments(ATOR_EGRESS_ALLOW="127.0.0.1", ATOR_JOB_POLL_INTERVAL="0.1",
                             ATOR_MCP_CATALOG_TTL="0", ATOR_RATE_LIMIT_PER_MINUTE="10000")
    return Served(deployment, deployment.start("gateway"))


async def _tenant(served: Served) -> Tenant:
    operator = served.deployment.client(served.replica)
    org = await operator.ok("POST", "/v1/orgs", 201, json={"name": f"gw-{uuid.uuid4().hex}"})
    keys = []
    for role in ("admin", "viewer"):
        made = await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": role, "role": role, "email": f"{role}-{uuid.uuid4().hex[:6]}@gw.test"})
        keys.append(made["key"])
    return Tenant(served.deployment.client(served.replica, keys[0]), *keys)


@asynccontextmanager
async def _mcp(url: str, key: str, era: str) -> AsyncIterator[McpClient]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                  timeout=60) as http, \
            McpClient(streamable_http_client(url, http_client=http), mode=era) as client:
        yield client


def _data(result: Any) -> str:
    text = "".join(getattr(block, "text", "") for block in result.content)
    if "<untrusted-data" not in text:
        return text
    return text[text.index(">\n") + 2:text.index("\n</untrusted-data>")]


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_native_upstream_of_each_era_and_workflow_tools_through_ator_serve(
        served: Served, era: str) -> None:
    a, b = await _tenant(served), await _tenant(served)
    async with serve_mcp(demo_server("m"), era="modern") as modern_url, \
            serve_mcp(demo_server("h"), era="handshake") as handshake_url:
        modern = await a.api.ok("POST", "/v1/mcp-servers", 201,
                                json={"name": "docs", "url": modern_url})
        handshake = await a.api.ok("POST", "/v1/mcp-servers", 201,
                                   json={"name": "browser", "url": handshake_url})
        flow = await a.api.ok("POST", "/v1/workflows", 201, json={"name": "double"})
        await a.api.ok("POST", f"/v1/workflows/{flow['id']}/versions", 201,
                       json={"recipe": DOUBLE})
        m_echo = f"{uuid.UUID(modern['id']).hex[:8]}__echo"
        h_echo = f"{uuid.UUID(handshake['id']).hex[:8]}__echo"
        h_write = f"{uuid.UUID(handshake['id']).hex[:8]}__write"
        async with _mcp(served.mcp, a.admin, era) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"calculator", m_echo, h_echo, h_write, "workflow__double"} <= names
            assert _data(await client.call_tool("calculator", {"expression": "6*7"})) == "42"
            assert _data(await client.call_tool(m_echo, {"text": "m"})) == "echo: m"
            assert _data(await client.call_tool(h_echo, {"text": "h"})) == "echo: h"
            run = json.loads(_data(await client.call_tool("workflow__double", {"n": 4})))
            assert (run["status"], run["output"]) == ("succeeded", 8)
        async with _mcp(served.mcp, a.viewer, era) as viewer:
            assert _data(await viewer.call_tool(h_echo, {"text": "v"})) == "echo: v"
            with pytest.raises(MCPError) as denied:
                await viewer.call_tool(h_write, {"value": "x"})
            assert denied.value.error.data["code"] == "tool_denied"
        async with _mcp(served.mcp, b.admin, era) as stranger:
            names = {t.name for t in (await stranger.list_tools()).tools}
            assert "calculator" in names
            assert not names & {m_echo, h_echo, h_write, "workflow__double"}
            for name, args in ((m_echo, {"text": "x"}), ("workflow__double", {"n": 1})):
                with pytest.raises(MCPError) as unknown:
                    await stranger.call_tool(name, args)
                assert unknown.value.error.data["code"] == "unknown_tool"
        calls = (await a.api.ok("GET", "/v1/gateway/calls", params={"limit": 200}))["data"]
        assert {"calculator", m_echo, h_echo, "workflow__double", h_write} <= {
            c["tool"] for c in calls}
        theirs = (await b.api.ok("GET", "/v1/gateway/calls"))["data"]  # b's own two refusals
        assert sorted((c["tool"], c["error_code"]) for c in theirs) == sorted(
            [(m_echo, "unknown_tool"), ("workflow__double", "unknown_tool")])


async def test_two_downstream_sessions_of_a_stateful_upstream_keep_their_own_state(
        served: Served) -> None:
    a = await _tenant(served)
    async with serve_mcp(counter_server(), era="handshake") as counter_url:
        made = await a.api.ok("POST", "/v1/mcp-servers", 201,
                              json={"name": "counter", "url": counter_url})
        bump = f"{uuid.UUID(made['id']).hex[:8]}__bump"
        async with _mcp(served.mcp, a.admin, "legacy") as one, \
                _mcp(served.mcp, a.admin, "legacy") as two:
            seen = [_data(await c.call_tool(bump, {})) for c in (one, two, one, one, two)]
        assert seen == ["1", "1", "2", "3", "2"]
