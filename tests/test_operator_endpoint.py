"""The operator's own endpoint on loopback (issue 17, D3): an `ATOR_OPENAI_BASE_URL` on
127.0.0.1 (a local vLLM or llama.cpp server) is the operator's decision, so a turn reaches
it without `ATOR_EGRESS_ALLOW`; exactly that scheme, host and port, and only for the process
path: a tenant's setup naming the same URL is refused `egress_blocked`. `ator doctor` judges
the endpoint by the same rule. MCP server URLs with a loopback *name* are refused at write,
like every loopback address spelling."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from ator import Ator
from ator.cli.doctor import run_checks
from ator.errors import EgressBlocked, ValidationFailed
from ator.providers.registry import ProviderRegistry
from ator.testing.openai_wire import OpenAIWireFake
from ator.testing.wire import Reply
from tests.conftest import new_thread, operator_client
from tests.test_api import _org_with_admin, auth


async def _no_secret(name: str) -> str:
    return "tenant-key"


async def test_a_turn_reaches_the_operators_loopback_endpoint_and_a_tenant_does_not(
        make_ator: Any, settings_factory: Any) -> None:
    async with OpenAIWireFake([Reply(text="hello from the local server")]) as fake:
        url = fake.base_url
        assert urlsplit(url).hostname == "127.0.0.1"
        settings = {"openai_base_url": url, "openai_api_key": "sk-operator"}
        async with make_ator(**settings) as ator:  # no egress_allow
            scope, thread = await new_thread(ator, "openai", model="gpt-4o-mini")
            result = await ator.ask(scope, thread.id, "hi", timeout=30)
            assert (result.status, result.text) == ("done", "hello from the local server")
            assert len(fake.requests) == 1
            # A tenant's setup naming the same endpoint is refused at write...
            await ator.put_secret(scope, "mine", "tenant-key")
            for base in (url, url.replace("127.0.0.1", "localhost")):
                with pytest.raises(ValidationFailed) as refused:
                    await ator.create_setup(scope, name="own", provider="openai",
                                            model="gpt-4o-mini",
                                            config={"base_url": base,
                                                    "api_key": "secret:mine"})
                assert refused.value.code == "egress_blocked"
            # ...and when built (a setup stored before the rule), never on the operator's rule.
            registry = ProviderRegistry(settings_factory(**settings))
            try:
                with pytest.raises(EgressBlocked):
                    await registry.build("openai", {"base_url": url, "api_key": "secret:mine"},
                                         _no_secret)
            finally:
                await registry.aclose()
        assert len(fake.requests) == 1
        # The doctor says what the turn does: reachable, under the operator's own rule.
        checks = {c.name: c for c in await run_checks(settings_factory(**settings))}
        assert checks["provider openai"].status == "ok", checks["provider openai"]


async def test_the_operators_exception_is_exactly_its_origin(settings_factory: Any) -> None:
    from ator.net.egress import Egress

    egress = Egress.from_settings(settings_factory()).for_endpoint("http://127.0.0.1:8000/v1")
    admitted = await egress.guard.admit("http", "127.0.0.1", 8000)
    assert admitted.addresses == ("127.0.0.1",)
    for scheme, host, port in (("http", "127.0.0.1", 8001), ("https", "127.0.0.1", 8000),
                               ("http", "10.0.0.1", 8000)):
        with pytest.raises(EgressBlocked):
            await egress.guard.admit(scheme, host, port)
    with pytest.raises(EgressBlocked):  # the process's plain rule is unchanged
        await Egress.from_settings(settings_factory()).guard.admit("http", "127.0.0.1", 8000)


@pytest.fixture
async def api(make_ator: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=1000) as made:
        yield made


@pytest.mark.parametrize("url", [
    "http://localhost:8931/mcp", "http://LOCALHOST./mcp", "https://app.localhost/mcp",
    "http://localhost.localdomain/mcp", "http://ip6-localhost/mcp", "http://127.0.0.1/mcp",
    "http://[::1]:9/mcp", "http://0x7f000001/mcp"])
async def test_a_loopback_mcp_url_is_refused_at_write(api: Any, url: str) -> None:
    client, operator, _ = api
    a = await _org_with_admin(client, operator, "mcp-loop")
    made = await client.post("/v1/mcp-servers", headers=auth(a), json={"name": "x", "url": url})
    assert made.status_code == 422, made.text
    assert made.json()["code"] == "egress_blocked"
    assert (await client.get("/v1/mcp-servers", headers=auth(a))).json()["data"] == []
    ok = await client.post("/v1/mcp-servers", headers=auth(a), json={
        "name": "x", "url": "https://mcp.example.com/mcp"})
    assert ok.status_code == 201, ok.text
    patched = await client.patch(f"/v1/mcp-servers/{ok.json()['id']}", headers=auth(a),
                                 json={"url": url})
    assert patched.status_code == 422 and patched.json()["code"] == "egress_blocked"

