"""Who the client is, against a real `ator serve` (issue 17 S9): X-Forwarded-For and
X-Forwarded-Proto count only from ATOR_TRUSTED_PROXIES. uvicorn's own default believed them
from 127.0.0.1, so anyone on the server's host (or a proxy passing the header through) could
take a fresh address per login attempt and never meet the limit."""

from __future__ import annotations

import httpx
import pytest

from ator.engine.logins import PAIR_FAILURES
from tests.e2e.conftest import DeploymentFactory

pytestmark = pytest.mark.e2e

GUESS = "ator_0badc0de_notthesecretnotthesecret"


async def _login(client: httpx.AsyncClient, key: str, **headers: str) -> httpx.Response:
    return await client.post("/v1/sessions", json={"key": key}, headers=headers)


async def test_forwarded_headers_are_ignored_unless_the_proxy_is_trusted(
    deployments: DeploymentFactory,
) -> None:
    deployment = deployments()
    replica = deployment.start("no-proxy")
    async with httpx.AsyncClient(base_url=replica.url, timeout=30) as client:
        codes = [(await _login(client, GUESS, **{"X-Forwarded-For": f"203.0.113.{n}"}))
                 .status_code for n in range(PAIR_FAILURES + 1)]
        # One address throughout (the peer's): locked once the limit is passed.
        assert codes == [401] * PAIR_FAILURES + [429], codes
        # A valid key from the same host is not locked out by those failures.
        ok = await _login(client, deployment.admin_key, **{"X-Forwarded-Proto": "https"})
        assert ok.status_code == 201, ok.text
        # X-Forwarded-Proto is not believed either: the cookie is the plain-http one.
        assert ok.headers["set-cookie"].startswith("ator_session="), ok.headers


async def test_a_trusted_proxy_names_the_client(deployments: DeploymentFactory) -> None:
    deployment = deployments(ATOR_TRUSTED_PROXIES="127.0.0.1")
    replica = deployment.start("behind-proxy")
    async with httpx.AsyncClient(base_url=replica.url, timeout=30) as client:
        # The client the proxy names is the one counted (the rightmost untrusted entry: a
        # client cannot hide behind an address it puts first itself).
        spoofed = {"X-Forwarded-For": "198.51.100.1, 192.0.2.10"}
        codes = [(await _login(client, GUESS, **spoofed)).status_code
                 for _ in range(PAIR_FAILURES + 1)]
        assert codes == [401] * PAIR_FAILURES + [429], codes
        changed = {"X-Forwarded-For": "198.51.100.2, 192.0.2.10"}
        assert (await _login(client, GUESS, **changed)).status_code == 429
        other = await _login(client, GUESS, **{"X-Forwarded-For": "192.0.2.11"})
        assert other.status_code == 401, other.text
        # Over https as the proxy says: the __Host- cookie.
        ok = await _login(client, deployment.admin_key, **{"X-Forwarded-For": "192.0.2.12",
                                                           "X-Forwarded-Proto": "https"})
        assert ok.status_code == 201, ok.text
        assert ok.headers["set-cookie"].startswith("__Host-ator_session="), ok.headers
