"""The MCP client and its session pool against real MCP servers the tests start on loopback
(the `mcp` SDK's server side): the era picked, legacy SSE, expired sessions, the read-only
retry rule, one session per conversation, timeouts, and every error code."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest

from ator.errors import EgressBlocked, McpError
from ator.mcp.client import McpEndpoint, McpSession
from ator.mcp.pool import McpPool, SessionKey
from ator.net import Egress, EgressPolicy
from ator.net.guard import parse_allowlist
from tests.mcp_servers import ServerState, demo_server, serve_mcp
from tests.ssrf import assert_ssrf_refused


def loopback_egress() -> Egress:
    hosts, networks = parse_allowlist(["127.0.0.1"])
    return Egress(EgressPolicy(allow_hosts=hosts, allow_networks=networks))


def endpoint(url: str, timeout: float = 10.0, name: str = "demo") -> McpEndpoint:
    return McpEndpoint(name, "http", url, timeout=timeout)


@pytest.mark.parametrize(("era", "want_era", "want_transport"), [
    ("modern", "2026-07-28", "streamable_http"),
    ("dual", "2026-07-28", "streamable_http"),
    ("handshake", "2025-11-25", "streamable_http"),
    ("sse", "2026-07-28", "sse"),
])
async def test_discovery_and_calls_on_every_era(era: str, want_era: str,
                                                 want_transport: str) -> None:
    state = ServerState()
    async with serve_mcp(demo_server(state=state), era=era) as url:
        session = await McpSession.open(endpoint(url), loopback_egress())
        try:
            assert (session.era, session.transport) == (want_era, want_transport)
            tools = {t.name: t for t in await session.list_tools()}
            assert {"echo", "write", "big", "hang"} <= set(tools)
            assert tools["echo"].read_only and not tools["write"].read_only
            result = await session.call("echo", {"text": "hi"})
            assert result.content[0].text == "echo: hi"  # type: ignore[union-attr]
            assert state.calls == {"echo": 1}
        finally:
            await session.aclose()


async def test_a_server_of_another_era_is_mcp_protocol_unsupported_naming_both_sides() -> None:
    async with serve_mcp(era="future") as url:
        with pytest.raises(McpError) as caught:
            await McpSession.open(endpoint(url), loopback_egress())
    assert caught.value.code == "mcp_protocol_unsupported"
    assert caught.value.facts["server_supports"] == ["2099-01-01"]
    assert "2026-07-28" in caught.value.facts["client_supports"]
    assert "2099-01-01" in caught.value.message


@pytest.mark.parametrize(("status", "code"), [(401, "mcp_auth_failed"),
                                               (403, "mcp_auth_failed"),
                                               (500, "mcp_http_status")])
async def test_http_failures_have_their_code_and_status(status: int, code: str) -> None:
    async with serve_mcp(status=status) as url:
        with pytest.raises(McpError) as caught:
            await McpSession.open(endpoint(url), loopback_egress())
    assert caught.value.code == code
    assert caught.value.facts["status"] == status


async def test_nothing_listening_is_mcp_server_unavailable() -> None:
    async with serve_mcp(status=200) as url:
        pass  # the port is closed again
    with pytest.raises(McpError) as caught:
        await McpSession.open(endpoint(url, timeout=5), loopback_egress())
    assert caught.value.code == "mcp_server_unavailable"


async def test_an_unknown_transport_is_mcp_transport_unsupported() -> None:
    with pytest.raises(McpError) as caught:
        await McpSession.open(McpEndpoint("x", "websocket", "ws://127.0.0.1:1/"),
                              loopback_egress())
    assert caught.value.code == "mcp_transport_unsupported"


async def test_a_hanging_tool_is_mcp_timeout_and_the_session_stays_usable() -> None:
    state = ServerState()
    async with serve_mcp(demo_server(state=state)) as url:
        session = await McpSession.open(endpoint(url, timeout=10), loopback_egress())
        try:
            with pytest.raises(McpError) as caught:
                await session.call("hang", {}, timeout=0.5)
            assert caught.value.code == "mcp_timeout"
            assert caught.value.facts["timeout_s"] == 0.5
            assert not session.lost
            result = await session.call("echo", {"text": "after"})
            assert result.content[0].text == "echo: after"  # type: ignore[union-attr]
        finally:
            state.release.set()
            await session.aclose()


async def test_an_mcp_url_on_a_private_address_is_egress_blocked_before_connecting() -> None:
    with pytest.raises(EgressBlocked) as caught:
        await McpSession.open(endpoint("http://10.0.0.1/mcp"), Egress(EgressPolicy()))
    assert caught.value.code == "egress_blocked"


async def test_the_mcp_url_surface_passes_the_ssrf_matrix() -> None:
    async def surface(url: str, egress: Egress) -> None:
        session = await McpSession.open(endpoint(url, timeout=5), egress)
        await session.aclose()

    await assert_ssrf_refused(surface)


def key(root: uuid.UUID, org: uuid.UUID | None = None,
        server: uuid.UUID | None = None) -> SessionKey:
    return SessionKey(org or ORG, server or SERVER, root)


ORG, SERVER = uuid.uuid4(), uuid.uuid4()


async def test_an_expired_session_reconnects_and_a_read_only_call_is_retried_once() -> None:
    state = ServerState()
    pool = McpPool(loopback_egress())
    async with serve_mcp(demo_server(state=state), era="expiring", state=state) as url:
        try:
            e, k = endpoint(url), key(uuid.uuid4())
            await pool.call(k, e, "echo", {"text": "1"}, read_only=True)
            state.expire_all()
            result = await pool.call(k, e, "echo", {"text": "2"}, read_only=True)
            assert result.content[0].text == "echo: 2"  # type: ignore[union-attr]
            assert pool.opened == 2  # reconnected once
            assert state.calls["echo"] == 2  # the expired attempt never reached the tool
        finally:
            await pool.aclose()


async def test_a_write_on_an_expired_session_is_not_retried_and_the_model_is_told() -> None:
    state = ServerState()
    pool = McpPool(loopback_egress())
    async with serve_mcp(demo_server(state=state), era="expiring", state=state) as url:
        try:
            e, k = endpoint(url), key(uuid.uuid4())
            await pool.call(k, e, "echo", {"text": "warm"}, read_only=True)
            state.expire_all()
            with pytest.raises(McpError) as caught:
                await pool.call(k, e, "write", {"value": "x"}, read_only=False)
            assert caught.value.code == "mcp_session_restarted"
            assert caught.value.facts == {"retried": False}
            assert "may or may not have happened" in caught.value.message
            assert "write" not in state.calls
            # The next call reconnects.
            result = await pool.call(k, e, "write", {"value": "y"}, read_only=False)
            assert result.content[0].text == "wrote y"  # type: ignore[union-attr]
            assert pool.opened == 2
        finally:
            await pool.aclose()


async def test_two_conversations_get_two_sessions_and_one_tree_shares_one() -> None:
    state = ServerState()
    pool = McpPool(loopback_egress())
    async with serve_mcp(demo_server(state=state)) as url:
        try:
            e = endpoint(url)
            root_a, root_b = uuid.uuid4(), uuid.uuid4()
            a = await pool.session(key(root_a), e)
            b = await pool.session(key(root_b), e)
            subagent = await pool.session(key(root_a), e)  # a subagent of conversation A
            assert a is subagent and a is not b
            other_org = await pool.session(key(root_a, org=uuid.uuid4()), e)
            assert other_org is not a
            await asyncio.gather(a.call("echo", {"text": "a"}), b.call("echo", {"text": "b"}),
                                 other_org.call("echo", {"text": "c"}))
            assert len(state.sessions) == 3 and pool.opened == 3
        finally:
            await pool.aclose()


async def test_idle_sessions_expire_and_the_caps_evict_the_least_recent() -> None:
    now = [0.0]
    pool = McpPool(loopback_egress(), idle_ttl=60, max_sessions=3, max_per_org=2,
                   clock=lambda: now[0])
    async with serve_mcp(demo_server()) as url:
        try:
            e = endpoint(url)
            org = uuid.uuid4()
            first = key(uuid.uuid4(), org=org)
            await pool.session(first, e)
            await pool.session(key(uuid.uuid4(), org=org), e)
            await pool.session(key(uuid.uuid4(), org=org), e)  # per-org cap: first goes
            assert first not in pool and len(pool) == 2
            await pool.session(key(uuid.uuid4()), e)
            await pool.session(key(uuid.uuid4()), e)  # global cap 3
            assert len(pool) == 3
            now[0] = 61.0
            fresh = key(uuid.uuid4())
            await pool.session(fresh, e)  # the sweep closes every idle one first
            assert pool.keys() == [fresh]
        finally:
            await pool.aclose()


async def test_a_stdio_server_from_the_operator_settings_is_discovered_and_called() -> None:
    script = Path(__file__).with_name("mcp_stdio_server.py")
    session = await McpSession.open(
        McpEndpoint("local", "stdio", command=(sys.executable, str(script)), timeout=30), None)
    try:
        assert session.transport == "stdio"
        assert [t.name for t in await session.list_tools()] == ["add"]
        result = await session.call("add", {"a": 2, "b": 3})
        assert result.content[0].text == "5"  # type: ignore[union-attr]
    finally:
        await session.aclose()
