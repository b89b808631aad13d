"""The HTTP API in-process (ASGI transport, real PostgreSQL): auth, roles, org provisioning,
problem+json, rate limits. Real `ator serve` processes are exercised in tests/e2e."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator import Ator
from tests.conftest import operator_client


@pytest.fixture
async def api(make_ator) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=1000) as made:
        yield made


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _org_with_admin(client: httpx.AsyncClient, operator: str, name: str) -> str:
    org = (await client.post("/v1/orgs", json={"name": name}, headers=auth(operator))).json()
    made = await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(operator),
                             json={"name": "first", "role": "admin", "email": "boss@b"})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


async def test_operator_provisions_an_org_that_cannot_see_other_orgs(api: Any) -> None:
    client, operator, _ = api
    a_key = await _org_with_admin(client, operator, "A")
    b_key = await _org_with_admin(client, operator, "B")
    setup = (await client.post("/v1/setups", headers=auth(a_key), json={
        "name": "s", "provider": "scripted", "model": "scripted",
        "config": {"script": [{"text": "hi"}]}})).json()
    thread = (await client.post("/v1/threads", headers=auth(a_key),
                                json={"setup_id": setup["id"]})).json()
    for path in (f"/v1/threads/{thread['id']}", f"/v1/setups/{setup['id']}",
                 f"/v1/threads/{thread['id']}/events"):
        got = await client.get(path, headers=auth(b_key))
        assert got.status_code == 404, path
        assert got.headers["content-type"] == "application/problem+json"
        assert got.json()["code"] == "not_found"
    assert (await client.get("/v1/threads", headers=auth(b_key))).json()["data"] == []
    # A tenant admin cannot create orgs or keys for another org.
    assert (await client.post("/v1/orgs", json={"name": "x"}, headers=auth(a_key))
            ).status_code == 404
    org_b = (await client.get("/v1/orgs", headers=auth(b_key))).json()["data"][0]["id"]
    denied = await client.post(f"/v1/orgs/{org_b}/api-keys", headers=auth(a_key),
                               json={"name": "n", "role": "admin", "email": "e@x"})
    assert denied.status_code == 404


async def test_roles_are_enforced_and_errors_are_problems(api: Any) -> None:
    client, operator, _ = api
    admin = await _org_with_admin(client, operator, "C")
    viewer = (await client.post("/v1/api-keys", headers=auth(admin), json={
        "name": "v", "role": "viewer", "email": "v@c"})).json()["key"]
    denied = await client.post("/v1/setups", headers=auth(viewer), json={
        "name": "s", "provider": "scripted", "model": "m"})
    assert denied.status_code == 403 and denied.json()["code"] == "forbidden"
    bad = await client.post("/v1/setups", headers=auth(admin), json={"name": ""})
    assert bad.status_code == 422 and bad.json()["code"] == "validation_failed"
    clear = await client.post("/v1/setups", headers=auth(admin), json={
        "name": "s", "provider": "anthropic", "model": "m", "config": {"api_key": "sk-x"}})
    assert clear.status_code == 422 and clear.json()["code"] == "secret_in_config"
    assert (await client.get("/v1/threads")).json()["code"] == "unauthenticated"
    revoked = (await client.get("/v1/api-keys", headers=auth(admin))).json()["data"]
    viewer_id = next(k["id"] for k in revoked if k["role"] == "viewer")
    await client.delete(f"/v1/api-keys/{viewer_id}", headers=auth(admin))
    assert (await client.get("/v1/threads", headers=auth(viewer))).status_code == 401


async def test_rate_limit_answers_429_with_retry_after(api: Any) -> None:
    client, operator, runtime = api
    key = await _org_with_admin(client, operator, "D")
    object.__setattr__(runtime.settings, "rate_limit_per_minute", 3)
    try:
        answers = [await client.get("/v1/threads", headers=auth(key)) for _ in range(5)]
    finally:
        object.__setattr__(runtime.settings, "rate_limit_per_minute", 1000)
    # A minute window can roll over mid-test; then the count restarts, never exceeds 3 in one.
    codes = [a.status_code for a in answers]
    assert codes.count(429) >= 1 and set(codes) <= {200, 429}
    limited = next(a for a in answers if a.status_code == 429)
    assert limited.json()["code"] == "rate_limited"
    assert 1 <= int(limited.headers["retry-after"]) <= 60
