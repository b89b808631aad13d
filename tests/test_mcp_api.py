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


CREDENTIAL_URLS = {
    "userinfo": "https://bob:hunter2@mcp.example.com/mcp",
    "token as username": "https://ghp1234567890@mcp.example.com/mcp",
    "api_key query": "https://mcp.example.com/mcp?api_key=hunter2",
    "token query": "https://mcp.example.com/mcp?team=a&token=hunter2",
    "sig query": "https://mcp.example.com/mcp?sv=2024&sig=hunter2",
    "token in the fragment": "https://mcp.example.com/mcp#access_token=hunter2",
}


@pytest.mark.parametrize("case", list(CREDENTIAL_URLS))
async def test_a_url_carrying_a_credential_is_refused_on_create_and_update(
    api: Any, case: str
) -> None:
    """Issue 17 S3, S10: refused like a setup's (422 `secret_in_config`), pointing to headers
    by secret reference; nothing is stored and nothing changes."""
    client, operator, _ = api
    a = await _org_with_admin(client, operator, f"mcp-cred-{case}")
    url = CREDENTIAL_URLS[case]
    made = await client.post("/v1/mcp-servers", headers=auth(a), json={"name": "x", "url": url})
    assert made.status_code == 422, made.text
    body = made.json()
    assert made.headers["content-type"] == "application/problem+json"
    assert body["code"] == "secret_in_config" and body["errors"][0]["loc"] == ["url"]
    assert "headers" in body["detail"] and "secret:NAME" in body["detail"]
    assert "hunter2" not in made.text
    assert (await client.get("/v1/mcp-servers", headers=auth(a))).json()["data"] == []
    good = (await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "y", "url": "https://mcp.example.com/mcp?team=a"})).json()
    patched = await client.patch(f"/v1/mcp-servers/{good['id']}", headers=auth(a),
                                 json={"url": url})
    assert patched.status_code == 422 and patched.json()["code"] == "secret_in_config"
    after = (await client.get(f"/v1/mcp-servers/{good['id']}", headers=auth(a))).json()
    assert after == good


async def test_a_stored_url_with_a_password_is_shown_to_no_viewer(api: Any) -> None:
    """A row written before the rule keeps working for the server but shows no password."""
    from ator.store import mcp_servers as server_store
    from ator.store.scope import Scope

    client, operator, runtime = api
    a = await _org_with_admin(client, operator, "mcp-old-row")
    org_id = (await client.get("/v1/sessions/current", headers=auth(a))).json()["org_id"]
    await server_store.create_server(
        runtime.db, Scope(uuid.UUID(org_id)), name="old", transport="http",
        url="https://bob:hunter2@mcp.example.com/mcp?access_token=hunter3", headers={},
        timeout_s=30.0, enabled=True, allow=None, deny=[])
    viewer = (await client.post("/v1/api-keys", headers=auth(a), json={
        "name": "v", "role": "viewer", "email": "viewer@x.example"})).json()["key"]
    listed = await client.get("/v1/mcp-servers", headers=auth(viewer))
    one = await client.get(f"/v1/mcp-servers/{listed.json()['data'][0]['id']}",
                           headers=auth(viewer))
    for text in (listed.text, one.text):
        assert "hunter2" not in text and "hunter3" not in text
    assert one.json()["url"] == \
        "https://[redacted]@mcp.example.com/mcp?access_token=[redacted]"


UNKNOWN_KEYS = {
    "POST scope": ("post", {"name": "x", "url": "https://mcp.example.com/mcp", "scope": "x"}),
    "POST self": ("post", {"name": "x", "url": "https://mcp.example.com/mcp", "self": 1}),
    "POST catalog": ("post", {"name": "x", "url": "https://mcp.example.com/mcp",
                              "catalog": []}),
    "PATCH server_id": ("patch", {"server_id": str(uuid.uuid4())}),
    "PATCH scope": ("patch", {"scope": "x"}),
    "PATCH changes": ("patch", {"changes": {}}),
    "POST a list": ("post", ["name"]),
}


@pytest.mark.parametrize("case", list(UNKNOWN_KEYS))
async def test_an_unknown_body_key_is_a_422_problem_never_a_500(api: Any, case: str) -> None:
    """Issue 17 S6: the bodies are typed (extra keys forbidden), so a key that would have
    collided with a parameter of the runtime's method is refused with a stable code."""
    client, operator, _ = api
    a = await _org_with_admin(client, operator, f"mcp-keys-{case}")
    method, body = UNKNOWN_KEYS[case]
    if method == "post":
        r = await client.post("/v1/mcp-servers", headers=auth(a), json=body)
    else:
        sid = (await client.post("/v1/mcp-servers", headers=auth(a), json={
            "name": "docs", "url": "https://mcp.example.com/mcp"})).json()["id"]
        r = await client.patch(f"/v1/mcp-servers/{sid}", headers=auth(a), json=body)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "validation_failed"


async def test_the_mcp_bodies_are_typed_in_openapi(api: Any) -> None:
    client, _, _ = api
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for path, method, name in (("/v1/mcp-servers", "post", "McpServerBody"),
                               ("/v1/mcp-servers/{server_id}", "patch", "McpServerPatch")):
        ref = spec["paths"][path][method]["requestBody"]["content"]["application/json"]
        assert ref["schema"]["$ref"].endswith(f"/{name}")
        assert schemas[name]["additionalProperties"] is False
        assert {"name", "url", "headers", "token", "allow", "deny"} <= set(
            schemas[name]["properties"])


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

