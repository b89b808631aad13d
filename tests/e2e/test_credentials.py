"""The credential rule and the egress guard over HTTP, against a real `ator serve`: an org
admin's setup never carries the operator's provider key to a URL the tenant names, and a
tenant URL the guard refuses ends the turn with `egress`.

The process key is real in this deployment (ATOR_ANTHROPIC_API_KEY / ATOR_OPENAI_API_KEY) and
goes to a process endpoint this test runs, so the test shows the key is in play and where it
went; every tenant endpoint is a loopback listener recording the headers it receives.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import uuid
from typing import Any

import pytest

from ator.testing import AnthropicWireFake, OpenAIWireFake, Reply
from tests.e2e.client import Client
from tests.e2e.conftest import DeploymentFactory

pytestmark = pytest.mark.e2e

PROCESS_KEY = f"sk-process-{uuid.uuid4().hex}"


async def _turn(api: Client, provider: str, config: dict[str, Any]) -> dict[str, Any]:
    setup = await api.create_setup({"name": f"s-{uuid.uuid4().hex[:6]}", "provider": provider,
                                    "model": "claude-haiku-4-5" if provider == "anthropic"
                                    else "gpt-4o-mini", "config": config})
    thread = await api.create_thread(setup["id"])
    await api.post_message(thread["id"], "hello")
    events = await api.follow(thread["id"], timeout=60)
    ended: dict[str, Any] = events[-1]["data"]
    return ended


def _all_received(*fakes: Any) -> str:
    return json.dumps([[dict(r.headers), r.body] for f in fakes for r in f.requests])


async def test_a_tenant_url_never_receives_the_process_key(
    deployments: DeploymentFactory,
) -> None:
    async with (
        AnthropicWireFake([Reply(text="process")] * 2) as process_anthropic,
        OpenAIWireFake([Reply(text="process")]) as process_openai,
        AnthropicWireFake([Reply(text="tenant")] * 3) as tenant_anthropic,
        OpenAIWireFake([Reply(text="tenant")] * 3) as tenant_openai,
    ):
        deployment = deployments(
            ATOR_ANTHROPIC_API_KEY=PROCESS_KEY, ATOR_OPENAI_API_KEY=PROCESS_KEY,
            ATOR_ANTHROPIC_BASE_URL=process_anthropic.base_url,
            ATOR_OPENAI_BASE_URL=process_openai.base_url,
            ATOR_EGRESS_ALLOW="127.0.0.1",
        )
        replica = deployment.start("credentials")
        operator = deployment.client(replica)
        org = await operator.ok("POST", "/v1/orgs", 201, json={"name": "tenant"})
        key = await operator.ok("POST", f"/v1/orgs/{org['id']}/api-keys", 201, json={
            "name": "admin", "role": "admin", "email": "admin@tenant.test"})
        admin = deployment.client(replica, key["key"])

        # The process endpoint gets the process key: the key is really in play here.
        ended = await _turn(admin, "anthropic", {})
        assert ended["status"] == "done", ended
        assert PROCESS_KEY in _all_received(process_anthropic)

        # Own base_url, no credential: refused, and the tenant URL sees no request at all.
        ended = await _turn(admin, "anthropic", {"base_url": tenant_anthropic.base_url})
        assert ended["stop_reason"] == "error:config", ended
        assert "own credential" in ended["error"]
        assert tenant_anthropic.requests == []

        # Own base_url and own secret: the secret goes there, the process key does not.
        await admin.ok("PUT", "/v1/secrets/mine", 204, json={"value": "sk-tenant-own"})
        ended = await _turn(admin, "anthropic", {"base_url": tenant_anthropic.base_url,
                                                 "api_key": "secret:mine"})
        assert ended["status"] == "done", ended
        assert "sk-tenant-own" in _all_received(tenant_anthropic)

        # An OpenAI-compatible server without auth: the request goes out with no key at all.
        ended = await _turn(admin, "openai", {"base_url": tenant_openai.base_url})
        assert ended["status"] == "done", ended
        assert len(tenant_openai.requests) == 1

        # Headers cannot smuggle the request elsewhere either: refused when the setup is
        # written (the transport would refuse a Host that differs from the URL too).
        refused = await admin.request("POST", "/v1/setups", json={
            "name": "smuggle", "provider": "openai", "model": "gpt-4o-mini",
            "config": {"base_url": tenant_openai.base_url,
                       "headers": {"Host": "169.254.169.254"}}})
        assert refused.status_code == 422 and refused.json()["code"] == "forbidden_header"
        assert len(tenant_openai.requests) == 1

        assert PROCESS_KEY not in _all_received(tenant_anthropic, tenant_openai)


@pytest.fixture(scope="module")
async def guarded(deployments: DeploymentFactory) -> Client:
    """A deployment with the process key set and no allowlist: loopback is refused too."""
    deployment = deployments(ATOR_OPENAI_API_KEY=PROCESS_KEY)
    return deployment.client(deployment.start("guarded"))


@pytest.mark.parametrize("base_url", [
    "http://169.254.169.254/latest/meta-data/", "http://[::1]:9/", "http://0x7f000001:9/",
    "http://2130706433:9/", "http://0177.0.0.1:9/", "http://10.0.0.1/",
])
async def test_a_refused_tenant_address_is_refused_when_the_setup_is_written(
    guarded: Client, base_url: str,
) -> None:
    refused = await guarded.request("POST", "/v1/setups", json={
        "name": f"s-{uuid.uuid4().hex[:6]}", "provider": "openai", "model": "gpt-4o-mini",
        "config": {"base_url": base_url}})
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["code"] == "egress_blocked" and body["errors"][0]["loc"] == ["config", "base_url"]
    assert PROCESS_KEY not in refused.text


async def test_a_name_resolving_to_a_refused_address_ends_the_turn_with_egress_blocked(
    guarded: Client,
) -> None:
    # A name can only be judged once resolved: at the call, by the transport. (`localhost`
    # itself is refused at write now, by name; this machine's own host name is not a
    # loopback name, but resolves to one of this machine's addresses.)
    host = socket.gethostname()
    addresses = {info[4][0] for info in socket.getaddrinfo(host, 9)}
    assert addresses and not any(ipaddress.ip_address(a).is_global for a in addresses), (
        f"this test needs the host name {host!r} to resolve to a non-public address")
    ended = await _turn(guarded, "openai", {"base_url": f"http://{host}:9/"})
    assert ended["stop_reason"] == "error:egress", ended
    assert "refused" in ended["error"] and PROCESS_KEY not in ended["error"]
