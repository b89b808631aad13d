"""Legible errors from the gateway (`/mcp`), read through the SDK's own client of both eras
against the real app on loopback: a key over its rate limit gets a JSON-RPC error carrying
ator's `rate_limited` problem (with when to retry) while another key goes on; a bad key's
error carries `unauthenticated`; an upstream server of another era is left out with
`mcp_protocol_unsupported` and its `-32022` explanation whole (both sides' versions), the
rest of the catalog still listed and callable."""

from __future__ import annotations

from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from ator.api.app import create_app
from ator.engine.access import Access
from ator.engine.mcp import McpServers
from ator.store import keys as key_store
from tests.mcp_servers import demo_server, serve_app, serve_mcp
from tests.test_gateway import _client, _org, _text

ERAS = ["auto", "legacy"]


@pytest.mark.parametrize("era", ERAS)
async def test_a_key_over_its_rate_limit_gets_rate_limited_and_another_key_goes_on(
        make_ator: Any, era: str) -> None:
    limit = 6
    async with make_ator(rate_limit_per_minute=limit) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port:
        url = f"http://127.0.0.1:{port}/mcp"
        org = await _org(ator)
        refused: MCPError | None = None
        async with _client(url, org.admin, era) as client:
            # The window is fixed (a minute): one crossing resets it at most once, so
            # 3 * limit requests reach the limit whatever the clock.
            for i in range(3 * limit):
                try:
                    await client.call_tool("calculator", {"expression": f"{i}+1"})
                except MCPError as exc:
                    refused = exc
                    break
        assert refused is not None, "never limited"
        assert refused.error.code == -32029
        assert refused.error.data["code"] == "rate_limited"
        assert 1 <= refused.error.data["retry_after"] <= 61
        assert "more than 6 requests" in refused.error.message
        # The limit is the key's: another key of the same org and user still works.
        first = await ator.service(Access).authenticate(org.admin)
        assert first is not None
        _, fresh = await key_store.create_key(ator.db, org.scope, user_id=first.user_id,
                                              name="second", role="admin")
        async with _client(url, fresh, "auto") as other:
            got = await other.call_tool("calculator", {"expression": "2+2"})
        assert _text(got) == "4"


@pytest.mark.parametrize("era", ERAS)
async def test_a_bad_key_reads_unauthenticated_in_the_sdk_client(make_ator: Any,
                                                                 era: str) -> None:
    async with make_ator() as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port:
        with pytest.raises(BaseException) as caught:  # the SDK wraps it: the leaf is checked
            async with _client(f"http://127.0.0.1:{port}/mcp", "ator_bad_key", era) as client:
                await client.list_tools()
        error = _leaf(caught.value)
        assert error.error.code == -32001 and error.error.data["code"] == "unauthenticated"
        assert "not valid" in error.error.message


@pytest.mark.parametrize("era", ERAS)
async def test_an_upstream_of_another_era_is_left_out_with_its_explanation_whole(
        make_ator: Any, era: str) -> None:
    async with make_ator(rate_limit_per_minute=1000, egress_allow=("127.0.0.1",),
                         mcp_catalog_ttl=0) as ator, \
            serve_app(create_app(ator.settings, runtime=ator)) as port, \
            serve_mcp(era="future") as future_url, \
            serve_mcp(demo_server("ok"), era="dual") as ok_url:
        org = await _org(ator)
        servers = ator.service(McpServers)
        future = await servers.create_mcp_server(org.scope, name="future", url=future_url)
        fine = await servers.create_mcp_server(org.scope, name="fine", url=ok_url)
        async with _client(f"http://127.0.0.1:{port}/mcp", org.admin, era) as client:
            listed = await client.list_tools()
            [left] = listed.meta["ator/left_out"]
            assert left["source"] == f"mcp:{future.id}"
            assert left["code"] == "mcp_protocol_unsupported"
            assert "2099-01-01" in left["message"] and "2026-07-28" in left["message"]
            assert "2025-06-18" in left["message"]  # ator's whole list, not cut
            echo = f"{fine.id.hex[:8]}__echo"
            assert echo in {t.name for t in listed.tools}
            got = await client.call_tool(echo, {"text": "still here"})
            assert "echo: still here" in _text(got) and not got.is_error


def _leaf(exc: BaseException) -> MCPError:
    """The MCPError inside what the SDK's client raised (its task group wraps it)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    assert isinstance(exc, MCPError), exc
    return exc
