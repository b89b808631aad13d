"""Upstream MCP servers through the gateway (`/mcp`), with the SDK's own client against the real
app on loopback and real SDK servers upstream (one 2026-07-28-only, one handshake-era, one
down): their tools are listed under the server's stable id beside the native tools and
called through `ToolCalls` (audited); the server that is down is left out with its code and
empties nothing; each downstream session has its own upstream session, kept across calls;
after the upstream expires a session, a read-only call is retried and a write is not; another
org's key sees none of it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from ator import Ator
from ator.api.app import create_app
from ator.engine.access import Access
from ator.engine.approvals import Approvals, Decision
from ator.engine.mcp import McpServers, McpService
from ator.engine.tool_calls import ToolCalls
from tests.conftest import quiet_reaper
from tests.mcp_servers import ServerState, counter_server, demo_server, serve_app, serve_mcp
from tests.test_gateway import Org, _client, _org, _text
from tests.webhook_kit import until as until_async


@dataclass
class Upstreams:
    url: str
    ator: Ator
    org: Org
    modern: str  # the mounted names' prefixes: the first 8 hex digits of the server's id
    handshake: str
    down_id: uuid.UUID
    state: ServerState


@pytest.fixture
async def ups(make_ator: Any) -> AsyncIterator[Upstreams]:
    state = ServerState()
    async with make_ator(rate_limit_per_minute=1000, egress_allow=("127.0.0.1",),
                         mcp_catalog_ttl=0) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port, \
            serve_mcp(demo_server("m"), era="modern") as modern_url, \
            serve_mcp(demo_server("h", state), era="expiring", state=state) as handshake_url, \
            serve_mcp(status=503) as down_url:
        org = await _org(ator)
        servers = ator.service(McpServers)
        made = [await servers.create_mcp_server(org.scope, name=n, url=u) for n, u in (
            ("docs", modern_url), ("browser", handshake_url), ("broken", down_url))]
        yield Upstreams(f"http://127.0.0.1:{port}/mcp", ator, org, made[0].id.hex[:8],
                        made[1].id.hex[:8], made[2].id, state)


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_upstream_tools_are_listed_by_server_id_and_called_one_down_left_out(
        ups: Upstreams, era: str) -> None:
    async with _client(ups.url, ups.org.admin, era) as client:
        listed = await client.list_tools()
        names = {t.name for t in listed.tools}
        assert {f"{ups.modern}__echo", f"{ups.modern}__write", f"{ups.handshake}__echo",
                "calculator"} <= names
        [left] = listed.meta["ator/left_out"]
        assert left["source"] == f"mcp:{ups.down_id}" and left["code"].startswith("mcp_")
        echo = await client.call_tool(f"{ups.modern}__echo", {"text": "hi"})
        assert "echo: hi" in _text(echo) and not echo.is_error
        assert echo.meta["ator/untrusted"] is True  # from outside: labelled as data
        other = await client.call_tool(f"{ups.handshake}__echo", {"text": "yo"})
        assert "echo: yo" in _text(other)
    rows = (await ups.ator.service(ToolCalls).audit(ups.org.scope)).rows
    assert [r.tool for r in rows[:2]] == [f"{ups.handshake}__echo", f"{ups.modern}__echo"]


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_a_call_of_an_upstream_tool_costs_one_statement_its_audit_row(
        make_ator: Any, era: str) -> None:
    # Warm, a call reads nothing from the database: the key, the org's servers and its
    # approval gate are kept for their TTLs; what is left is the call's audit row. The
    # background loops that share the counter are kept out of the window.
    async with make_ator(rate_limit_per_minute=1000, egress_allow=("127.0.0.1",),
                         mcp_catalog_ttl=600, lease_ttl=60.0,
                         job_poll_interval=3600, schedule_interval=3600) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port, \
            serve_mcp(demo_server("m"), era="modern") as url:
        await quiet_reaper(ator)
        org = await _org(ator)
        made = await ator.service(McpServers).create_mcp_server(org.scope, name="docs", url=url)
        name = f"{made.id.hex[:8]}__echo"
        async with _client(f"http://127.0.0.1:{port}/mcp", org.admin, era) as client:
            await client.call_tool(name, {"text": "warm"})
            statements, _ = ator.db.stats.snapshot()
            for i in range(10):
                assert f"echo: {i}" in _text(await client.call_tool(name, {"text": str(i)}))
            after, _ = ator.db.stats.snapshot()
        assert after - statements == 10
        assert len((await ator.service(ToolCalls).audit(org.scope)).rows) == 11


async def test_another_orgs_key_neither_sees_nor_calls_the_upstream_tools(
        ups: Upstreams) -> None:
    b = await _org(ups.ator)
    async with _client(ups.url, b.admin, "auto") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "calculator" in names and not any("__" in n for n in names)
        with pytest.raises(MCPError) as refused:
            await client.call_tool(f"{ups.modern}__echo", {"text": "steal"})
        assert refused.value.error.data["code"] == "unknown_tool"


async def test_each_downstream_session_has_its_own_upstream_session_kept_across_calls(
        ups: Upstreams) -> None:
    pool = ups.ator.service(McpService).pool
    opened = pool.opened
    async with _client(ups.url, ups.org.admin, "legacy") as one, \
            _client(ups.url, ups.org.admin, "legacy") as two:
        for _ in range(5):
            await one.call_tool(f"{ups.handshake}__echo", {"text": "1"})
            await two.call_tool(f"{ups.handshake}__echo", {"text": "2"})
    # Two downstream sessions, two live upstreams: four sessions, not one per call.
    assert pool.opened - opened == 4
    assert len(ups.state.seen_ids) == 2  # the handshake upstream saw two distinct sessions


async def test_after_the_upstream_expires_its_session_a_read_is_retried_and_a_write_is_not(
        ups: Upstreams) -> None:
    # With the catalog stored (`/test` synced it), a call goes straight to the session.
    server = next(s for s in await ups.ator.service(McpServers).list_mcp_servers(ups.org.scope)
                  if s.name == "browser")
    assert (await ups.ator.service(McpServers).test_mcp_server(ups.org.scope, server.id))["ok"]
    async with _client(ups.url, ups.org.admin, "legacy") as client:
        await client.call_tool(f"{ups.handshake}__echo", {"text": "warm"})
        ups.state.expire_all()
        read = await client.call_tool(f"{ups.handshake}__echo", {"text": "again"})
        assert "echo: again" in _text(read) and not read.is_error
        ups.state.expire_all()
        before = ups.state.calls.get("write", 0)
        wrote = await client.call_tool(f"{ups.handshake}__write", {"value": "x"})
        assert wrote.is_error and wrote.meta["ator/code"] == "mcp_session_restarted"
        assert "may or may not have happened" in _text(wrote)
        assert ups.state.calls.get("write", 0) - before <= 1


async def test_a_session_found_expired_while_listing_is_replaced_before_a_write_is_sent(
        ups: Upstreams) -> None:
    # Without a stored catalog every call lists the server first: the dead session is found
    # (and replaced) by that listing, so the write goes, once, on the fresh session.
    async with _client(ups.url, ups.org.admin, "legacy") as client:
        await client.call_tool(f"{ups.handshake}__echo", {"text": "warm"})
        ups.state.expire_all()
        before = ups.state.calls.get("write", 0)
        wrote = await client.call_tool(f"{ups.handshake}__write", {"value": "x"})
        assert "wrote x" in _text(wrote) and not wrote.is_error
        assert ups.state.calls.get("write", 0) - before == 1


async def test_a_listing_is_reused_so_a_call_is_one_upstream_round_trip(
        ups: Upstreams, monkeypatch: pytest.MonkeyPatch) -> None:
    service = ups.ator.service(McpService)
    monkeypatch.setattr(service.toolset, "listing_ttl", 60.0)
    listed: list[Any] = []
    real = service.pool.list_tools

    async def counting(key: Any, endpoint: Any) -> Any:
        listed.append(key)
        return await real(key, endpoint)

    monkeypatch.setattr(service.pool, "list_tools", counting)
    async with _client(ups.url, ups.org.admin, "legacy") as client:
        for i in range(5):
            got = await client.call_tool(f"{ups.handshake}__echo", {"text": str(i)})
            assert f"echo: {i}" in _text(got)
    # Each live server listed once for this session (the one down is asked each time).
    live = [k for k in listed if k.server_id != ups.down_id]
    assert len(live) == 2, live


async def test_two_downstream_clients_of_a_stateful_upstream_see_separate_state(
        make_ator: Any) -> None:
    async with make_ator(rate_limit_per_minute=1000, egress_allow=("127.0.0.1",)) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port, \
            serve_mcp(counter_server(), era="handshake") as counter_url:
        org = await _org(ator)
        made = await ator.service(McpServers).create_mcp_server(org.scope, name="counter",
                                                                url=counter_url)
        bump = f"{made.id.hex[:8]}__bump"
        url = f"http://127.0.0.1:{port}/mcp"
        async with _client(url, org.admin, "legacy") as one, \
                _client(url, org.admin, "legacy") as two:
            seen = []
            for client in (one, one, two, one, two):
                seen.append(_data(_text(await client.call_tool(bump, {}))))
        assert seen == ["1", "2", "1", "3", "2"]


def _data(text: str) -> str:
    """The data inside the untrusted-data wrapper (tools.base.untrusted)."""
    return text[text.index(">\n") + 2:text.index("\n</untrusted-data>")]


async def test_a_write_the_org_gates_is_held_for_approval_and_runs_once_when_approved(
        ups: Upstreams) -> None:
    approvals = ups.ator.service(Approvals)
    await approvals.set_settings(ups.org.scope, approve_mcp_writes=True)
    before = ups.state.calls.get("write", 0)
    async with _client(ups.url, ups.org.admin, "legacy") as client:
        read = await client.call_tool(f"{ups.handshake}__echo", {"text": "free"})
        assert "echo: free" in _text(read)  # read-only: runs as ever
        held = await client.call_tool(f"{ups.handshake}__write", {"value": "x"})
        assert not held.is_error and held.meta["ator/code"] == "approval_pending"
        action_id = uuid.UUID(held.meta["ator/pending_action_id"])
        assert str(action_id) in _text(held)
        bad = await client.call_tool(f"{ups.handshake}__write", {"value": 7})
        assert bad.is_error and bad.meta.get("ator/code") != "approval_pending"  # refused
    assert ups.state.calls.get("write", 0) == before  # nothing ran
    [pending] = (await approvals.pending(ups.org.scope)).actions
    assert (pending.id, pending.name, pending.arguments) == (
        action_id, f"{ups.handshake}__write", {"value": "x"})
    admin = (await ups.ator.service(Access).authenticate(ups.org.admin))
    assert admin is not None
    done = await approvals.decide(ups.org.scope, action_id, admin.user_id,
                                  Decision(approve=True))
    assert done.status == "approved"

    async def ran() -> bool:
        return (await approvals.get(ups.org.scope, action_id)).result is not None
    await until_async(ran)
    assert ups.state.calls.get("write", 0) == before + 1
    assert "wrote x" in str((await approvals.get(ups.org.scope, action_id)).result)
