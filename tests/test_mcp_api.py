"""MCP servers over the HTTP API (in-process ASGI, real PostgreSQL, real MCP servers on
loopback): CRUD by role and org, secret references only, http only for tenants, the SSRF
guard at write time, `/test` reporting era/transport/tools and syncing the catalog, and a
turn driven by the wire-level Anthropic fake that calls `server__tool` and gets its result
labelled untrusted."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator import Ator
from ator.store import keys as key_store
from ator.testing.anthropic_wire import AnthropicWireFake
from ator.testing.wire import Reply, ToolCall
from tests.conftest import ended, operator_client, wait_for_event
from tests.mcp_servers import ServerState, demo_server, serve_mcp
from tests.test_api import _org_with_admin, auth


@pytest.fixture
async def api(make_ator: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=1000,
                               egress_allow=("127.0.0.1",)) as made:
        yield made


async def test_crud_roles_orgs_and_the_checks_on_write(api: Any) -> None:
    client, operator, _ = api
    a = await _org_with_admin(client, operator, "mcp-a")
    b = await _org_with_admin(client, operator, "mcp-b")
    made = await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "docs", "url": "https://mcp.example.com/mcp", "token": "secret:docs_token",
        "headers": {"X-Team": "secret:team"}, "deny": ["delete_*"]})
    assert made.status_code == 201, made.text
    server = made.json()
    assert server["headers"] == {"X-Team": "secret:team",
                                 "Authorization": "Bearer secret:docs_token"}
    sid = server["id"]
    assert (await client.get(f"/v1/mcp-servers/{sid}", headers=auth(a))).status_code == 200
    # Another org's id is a 404, for reads and writes.
    assert (await client.get(f"/v1/mcp-servers/{sid}", headers=auth(b))).status_code == 404
    assert (await client.patch(f"/v1/mcp-servers/{sid}", headers=auth(b),
                               json={"enabled": False})).status_code == 404
    assert (await client.post(f"/v1/mcp-servers/{sid}/test", headers=auth(b))).status_code == 404
    assert (await client.get("/v1/mcp-servers", headers=auth(b))).json()["data"] == []
    # A plain credential in a header, stdio from a tenant, a private URL: refused.
    plain = await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "x", "url": "https://h.example/mcp", "headers": {"Authorization": "Bearer abc"}})
    assert plain.status_code == 422 and plain.json()["code"] == "invalid_mcp_server"
    stdio = await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "x", "transport": "stdio", "url": "https://h.example/mcp"})
    assert stdio.status_code == 422 and stdio.json()["code"] == "mcp_transport_unsupported"
    private = await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "x", "url": "http://10.1.2.3/mcp"})
    assert private.status_code == 422 and private.json()["code"] == "egress_blocked"
    dup = await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "docs", "url": "https://other.example/mcp"})
    assert dup.status_code == 409 and dup.json()["code"] == "mcp_server_exists"
    patched = await client.patch(f"/v1/mcp-servers/{sid}", headers=auth(a),
                                 json={"enabled": False, "timeout_s": 5})
    assert patched.json()["enabled"] is False and patched.json()["version"] == 2
    assert (await client.delete(f"/v1/mcp-servers/{sid}", headers=auth(a))).status_code == 204
    assert (await client.get(f"/v1/mcp-servers/{sid}", headers=auth(a))).status_code == 404


async def test_a_viewer_reads_but_cannot_write(api: Any) -> None:
    client, operator, _ = api
    a = await _org_with_admin(client, operator, "mcp-v")
    viewer = (await client.post("/v1/api-keys", headers=auth(a), json={
        "name": "v", "role": "viewer", "email": "viewer@x.example"})).json()["key"]
    made = await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "docs", "url": "https://mcp.example.com/mcp"})
    assert made.status_code == 201
    listed = await client.get("/v1/mcp-servers", headers=auth(viewer))
    assert [s["name"] for s in listed.json()["data"]] == ["docs"]
    refused = await client.post("/v1/mcp-servers", headers=auth(viewer), json={
        "name": "v", "url": "https://mcp.example.com/mcp"})
    assert refused.status_code == 403
    assert (await client.post(f"/v1/mcp-servers/{made.json()['id']}/test",
                              headers=auth(viewer))).status_code == 403
    assert (await client.delete(f"/v1/mcp-servers/{made.json()['id']}",
                                headers=auth(viewer))).status_code == 403


async def test_an_admin_registers_tests_and_a_turn_calls_the_tool(api: Any) -> None:
    client, operator, runtime = api
    a = await _org_with_admin(client, operator, "mcp-e2e")
    state = ServerState()
    async with serve_mcp(demo_server("docs-server", state=state), era="handshake") as url, \
            AnthropicWireFake([
                Reply(tool_calls=[ToolCall("docs__echo", {"text": "from the model"})]),
                Reply(text="done"),
            ]) as fake:
        assert (await client.put("/v1/secrets/mcp_token", headers=auth(a),
                                 json={"value": "tok-123"})).status_code == 204
        server = (await client.post("/v1/mcp-servers", headers=auth(a), json={
            "name": "docs", "url": url, "token": "secret:mcp_token"})).json()
        tested = (await client.post(f"/v1/mcp-servers/{server['id']}/test",
                                    headers=auth(a))).json()
        assert tested["ok"] is True, tested
        assert (tested["era"], tested["transport"]) == ("2025-11-25", "streamable_http")
        assert tested["server"]["name"] == "docs-server"
        sizes = {t["name"]: t["size"] for t in tested["tools"]}
        assert {"echo", "write", "big", "hang"} <= set(sizes) and all(sizes.values())
        synced = (await client.get(f"/v1/mcp-servers/{server['id']}", headers=auth(a))).json()
        assert synced["synced"] and {t["name"] for t in synced["tools"]} == set(sizes)

        assert (await client.put("/v1/secrets/anthropic", headers=auth(a),
                                 json={"value": "sk-ant-test"})).status_code == 204
        setup = await client.post("/v1/setups", headers=auth(a), json={
            "name": "s", "provider": "anthropic", "model": "claude-test-model",
            "config": {"base_url": fake.base_url, "api_key": "secret:anthropic"}})
        assert setup.status_code == 201, setup.text
        thread = (await client.post("/v1/threads", headers=auth(a),
                                    json={"setup_id": setup.json()["id"]})).json()
        asked = await client.post(f"/v1/threads/{thread['id']}/messages", headers=auth(a),
                                  json={"text": "use the tool"})
        assert asked.status_code == 202, asked.text
        principal = await key_store.authenticate(runtime.db, a)
        assert principal is not None
        end = await wait_for_event(runtime, principal.scope, uuid.UUID(thread["id"]), ended)
        assert end.data["status"] == "done", end.data
    assert state.calls == {"echo": 1}
    first_tools = {t["name"]: t for t in fake.requests[0].body["tools"]}
    assert first_tools["docs__echo"]["description"].startswith("[mcp:docs] ")
    result = [b for m in fake.requests[1].body["messages"] for b in m["content"]
              if isinstance(b, dict) and b.get("type") == "tool_result"]
    text = json.dumps(result)
    assert "echo: from the model" in text
    assert "untrusted-data" in text and "mcp:docs" in text

