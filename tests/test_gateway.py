"""The MCP gateway (`/mcp`) driven by the `mcp` SDK's own client, both eras, against the real
app served by uvicorn on loopback (real PostgreSQL): an org key lists and calls its org's
native tools through `ToolCalls` (one audit row each); a viewer's key cannot call a write
tool; a bad key is a 401; another org's key neither uses the first's handshake session nor
reads its audit."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ator import Ator
from ator.api.app import create_app
from ator.engine.tool_calls import ToolCalls, arguments_hash
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store.scope import Scope
from ator.tools.base import Caller, Tool, ToolContext
from ator.tools.builtin import builtin_tools
from tests.mcp_servers import serve_app

ERAS = ["auto", "legacy"]  # auto: 2026-07-28 (server/discover); legacy: initialize + session


@dataclass
class Served:
    url: str
    ator: Ator
    notes: list[str]


@dataclass(frozen=True)
class Org:
    scope: Scope
    admin: str
    viewer: str


def _tools(notes: list[str]) -> list[Tool]:
    async def note(args: dict[str, Any], ctx: ToolContext) -> str:
        notes.append(str(args["text"]))
        return f"noted {len(notes)}"

    async def where(args: dict[str, Any], ctx: ToolContext) -> str:
        return f"in {args['region']}"

    return [*builtin_tools(), Tool("note", "write a note", {
        "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        note), Tool("where", "name the region (routed on by intermediaries)", {
            "type": "object", "required": ["region"],
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}},
        where, read_only=True)]


@pytest.fixture
async def served(make_ator: Any) -> AsyncIterator[Served]:
    notes: list[str] = []
    async with make_ator(tools=_tools(notes), rate_limit_per_minute=1000) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port:
        yield Served(f"http://127.0.0.1:{port}/mcp", ator, notes)


async def _org(ator: Ator) -> Org:
    org = await ator.create_org(f"gw-{uuid.uuid4().hex[:6]}")
    scope = Scope(org.id)
    keys = []
    for role in ("admin", "viewer"):
        user = await org_store.create_user(ator.db, scope, f"{role}@x", role)
        _, key = await key_store.create_key(ator.db, scope, user_id=user, name=role, role=role)
        keys.append(key)
    return Org(scope, *keys)


@asynccontextmanager
async def _client(url: str, key: str, era: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"},
                                  timeout=30) as http, \
            Client(streamable_http_client(url, http_client=http), mode=era) as client:
        yield client


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


@pytest.mark.parametrize("era", ERAS)
async def test_an_org_key_lists_and_calls_its_native_tools_with_one_audit_row_each(
        served: Served, era: str) -> None:
    org = await _org(served.ator)
    async with _client(served.url, org.admin, era) as client:
        listed = await client.list_tools()
        by_name = {t.name: t for t in listed.tools}
        assert {"calculator", "current_time", "note"} <= set(by_name)
        assert by_name["calculator"].annotations.read_only_hint is True
        assert by_name["note"].annotations.read_only_hint is False
        assert listed.cache_scope == "private"  # per tenant, never shared
        got = await client.call_tool("calculator", {"expression": "6 * 7"})
        assert (_text(got), got.is_error) == ("42", False)
        wrote = await client.call_tool("note", {"text": "hello"})
        assert not wrote.is_error and served.notes == ["hello"]
        invalid = await client.call_tool("calculator", {})
        assert invalid.is_error and invalid.meta["ator/code"] == "invalid_arguments"
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("no_such_tool", {})
        assert unknown.value.error.code == -32602
        assert unknown.value.error.data["code"] == "unknown_tool"
    rows = (await served.ator.service(ToolCalls).audit(org.scope)).rows
    assert [(r.tool, r.outcome, r.error_code) for r in reversed(rows)] == [
        ("calculator", "ok", None), ("note", "ok", None),
        ("calculator", "error", "invalid_arguments"), ("no_such_tool", "error", "unknown_tool")]
    assert {r.principal_kind for r in rows} == {"key"}
    assert rows[-1].args_sha256 == arguments_hash({"expression": "6 * 7"})


@pytest.mark.parametrize("era", ERAS)
async def test_a_viewer_key_calls_read_only_tools_only(served: Served, era: str) -> None:
    org = await _org(served.ator)
    async with _client(served.url, org.viewer, era) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "calculator" in names and "note" not in names
        assert _text(await client.call_tool("calculator", {"expression": "1+1"})) == "2"
        with pytest.raises(MCPError) as refused:
            await client.call_tool("note", {"text": "sneaky"})
        assert refused.value.error.data["code"] == "tool_denied"
        assert "viewer" in refused.value.error.message
    assert served.notes == []
    rows = (await served.ator.service(ToolCalls).audit(org.scope)).rows
    assert (rows[0].tool, rows[0].error_code) == ("note", "tool_denied")


async def test_a_missing_or_bad_key_is_401_with_a_json_rpc_error_carrying_the_problem(
        served: Served) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer ator_nope_not-a-key"},
                        {"Authorization": "Basic abc"}):
            got = await http.post(served.url, json=body, headers={
                **headers, "Accept": "application/json, text/event-stream"})
            assert got.status_code == 401, got.text
            assert got.headers["content-type"] == "application/json"
            error = got.json()["error"]
            assert error["code"] == -32001 and error["data"]["code"] == "unauthenticated"
            assert error["data"]["status"] == 401 and "API key" in error["message"]
            assert got.headers["www-authenticate"].startswith("Bearer")


async def test_another_orgs_key_cannot_use_the_first_orgs_session_or_audit(
        served: Served) -> None:
    a, b = await _org(served.ator), await _org(served.ator)
    accept = {"Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(timeout=30) as http:
        opened = await http.post(served.url, json=init,
                                 headers={**accept, "Authorization": f"Bearer {a.admin}"})
        assert opened.status_code == 200, opened.text
        session = {**accept, "mcp-session-id": opened.headers["mcp-session-id"],
                   "mcp-protocol-version": "2025-06-18"}
        await http.post(served.url, headers={**session, "Authorization": f"Bearer {a.admin}"},
                        json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        own = await http.post(served.url, json=listing,
                              headers={**session, "Authorization": f"Bearer {a.admin}"})
        assert own.status_code == 200 and own.json()["result"]["tools"], own.text
        # B's key on A's session: as if the session did not exist.
        other = await http.post(served.url, json=listing,
                                headers={**session, "Authorization": f"Bearer {b.admin}"})
        assert other.status_code == 404, other.text
    async with _client(served.url, a.admin, "legacy") as client:
        await client.call_tool("note", {"text": "from a"})
    async with _client(served.url, b.admin, "auto") as client:
        assert _text(await client.call_tool("calculator", {"expression": "2*3"})) == "6"
    # Each org reads its own audit rows only.
    a_rows = (await served.ator.service(ToolCalls).audit(a.scope)).rows
    b_rows = (await served.ator.service(ToolCalls).audit(b.scope)).rows
    assert [r.tool for r in a_rows] == ["note"] and [r.tool for r in b_rows] == ["calculator"]


async def test_the_audit_is_listed_over_http_by_page_org_scoped_and_role_checked(
        served: Served) -> None:
    a, b = await _org(served.ator), await _org(served.ator)
    async with _client(served.url, a.admin, "auto") as client:
        for expr in ("1+1", "2+2", "3+3"):
            await client.call_tool("calculator", {"expression": expr})
    base = served.url.removesuffix("/mcp")
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        seen: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            got = await http.get("/v1/gateway/calls", headers={
                "Authorization": f"Bearer {a.admin}"},
                params={"limit": 2, **({"cursor": cursor} if cursor else {})})
            assert got.status_code == 200, got.text
            seen += got.json()["data"]
            cursor = got.json()["next_cursor"]
            if cursor is None:
                break
        assert [r["args_sha256"] for r in seen] == [
            arguments_hash({"expression": e}) for e in ("3+3", "2+2", "1+1")]
        assert {(r["tool"], r["outcome"], r["principal_kind"]) for r in seen} == {
            ("calculator", "ok", "key")}
        other = await http.get("/v1/gateway/calls", headers={
            "Authorization": f"Bearer {b.admin}"})
        assert other.status_code == 200 and other.json()["data"] == []
        viewer = await http.get("/v1/gateway/calls", headers={
            "Authorization": f"Bearer {a.viewer}"})
        assert viewer.status_code == 403 and viewer.json()["code"] == "forbidden"
        nobody = await http.get("/v1/gateway/calls")
        assert nobody.status_code == 401
        for params, code in (({"limit": 0}, "validation_failed"),
                             ({"limit": "many"}, "validation_failed"),
                             ({"cursor": "bm90LWEtY3Vyc29y"}, "invalid_cursor")):
            bad = await http.get("/v1/gateway/calls", params=params,
                                 headers={"Authorization": f"Bearer {a.admin}"})
            assert bad.status_code == 422, (params, bad.text)
            assert bad.headers["content-type"] == "application/problem+json"
            assert bad.json()["code"] == code


async def test_tools_that_need_a_turn_are_not_offered_outside_one(make_ator: Any) -> None:
    async with make_ator(engine=False) as ator:  # the default tools: built-ins + subagents
        org = await _org(ator)
        caller = Caller("key", uuid.uuid4())
        names = {t.name for t in (await ator.service(ToolCalls).tools(org.scope, caller)).tools}
        assert {"calculator", "setup_list"} <= names
        assert not names & {"agent_spawn", "agent_status", "agent_abort", "agent_result"}


async def test_the_public_host_is_answered_and_any_other_host_is_421(make_ator: Any) -> None:
    async with make_ator(gateway_allowed_hosts=("ator.example.com",),
                         gateway_allowed_origins=("https://ator.example.com",)) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port:
        org = await _org(ator)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {"Authorization": f"Bearer {org.admin}", "MCP-Protocol-Version": "2025-06-18",
                   "Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=30) as http:
            url = f"http://127.0.0.1:{port}/mcp"
            public = await http.post(url, json=body, headers={**headers,
                                                               "Host": "ator.example.com"})
            assert public.status_code == 200, public.text
            assert (await http.post(url, json=body, headers=headers)).status_code == 421
            foreign = await http.post(url, json=body, headers={
                **headers, "Host": "ator.example.com", "Origin": "https://evil.example"})
            assert foreign.status_code == 403


async def test_a_2026_calls_mcp_param_header_is_checked_against_the_listed_schema(
        served: Served) -> None:
    org = await _org(served.ator)
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}}
    base = {"Authorization": f"Bearer {org.admin}", "MCP-Protocol-Version": "2026-07-28",
            "Accept": "application/json, text/event-stream"}

    def call(region: str) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "where", "arguments": {"region": region}, "_meta": meta}}

    async with httpx.AsyncClient(timeout=30) as http:
        listed = await http.post(served.url, headers={**base, "Mcp-Method": "tools/list"},
                                 json={"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                       "params": {"_meta": meta}})
        assert listed.status_code == 200, listed.text
        headers = {**base, "Mcp-Method": "tools/call", "Mcp-Name": "where"}
        same = await http.post(served.url, json=call("eu"),
                               headers={**headers, "Mcp-Param-Region": "eu"})
        assert same.status_code == 200, same.text
        assert same.json()["result"]["content"][0]["text"] == "in eu"
        other = await http.post(served.url, json=call("eu"),
                                headers={**headers, "Mcp-Param-Region": "us"})
        assert other.status_code == 400, other.text
        assert other.json()["error"]["code"] == -32020  # HEADER_MISMATCH
    rows = (await served.ator.service(ToolCalls).audit(org.scope)).rows
    assert [r.tool for r in rows] == ["where"]  # the mismatched call never ran
