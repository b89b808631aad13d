"""NUL in any text a request body carries (issue 17, D7): refused before it reaches the
database, with `unstorable_value` and the field's path, on every route that writes, never
the database's own "invalid byte sequence" (`invalid_value`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator import Ator
from tests.conftest import operator_client
from tests.test_api import _org_with_admin, auth


@pytest.fixture
async def api(make_ator: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=1000) as made:
        yield made


async def test_nul_is_refused_in_every_body_that_writes(api: Any) -> None:
    client, operator, _ = api
    admin = await _org_with_admin(client, operator, "nul")
    setup = (await client.post("/v1/setups", headers=auth(admin), json={
        "name": "s", "provider": "scripted", "model": "scripted"})).json()
    thread = (await client.post("/v1/threads", headers=auth(admin), json={
        "setup_id": setup["id"]})).json()
    writes: list[tuple[str, str, str, dict[str, Any], list[str]]] = [
        ("POST", "/v1/orgs", operator, {"name": "o\x00"}, ["name"]),
        ("POST", "/v1/api-keys", admin, {"name": "k\x00", "role": "viewer", "email": "a@b"},
         ["name"]),
        ("POST", "/v1/setups", admin, {"name": "s\x00", "provider": "scripted",
                                       "model": "scripted"}, ["name"]),
        ("POST", "/v1/setups", admin, {"name": "s", "provider": "scripted",
                                       "model": "scripted", "config": {"k\x00": 1}},
         ["config", "k\x00"]),
        ("POST", "/v1/threads", admin, {"setup_id": setup["id"], "title": "t\x00"},
         ["title"]),
        ("POST", "/v1/threads", admin, {"setup_id": setup["id"],
                                        "metadata": {"tags": ["a", "b\x00"]}},
         ["metadata", "tags", "1"]),
        ("POST", f"/v1/threads/{thread['id']}/messages", admin, {"text": "a\x00"}, ["text"]),
        ("POST", "/v1/mcp-servers", admin, {"name": "m", "url": "https://a.example/m\x00"},
         ["url"]),
        ("PUT", "/v1/org/policy", admin, {"text": "p\x00"}, ["text"]),
        ("PUT", "/v1/secrets/x", admin, {"value": "v\x00"}, ["value"]),
    ]
    for method, path, key, body, loc in writes:
        answer = await client.request(method, path, headers=auth(key), json=body)
        assert answer.status_code == 422, (path, answer.text)
        problem = answer.json()
        assert problem["code"] == "unstorable_value", (path, problem)
        assert problem["errors"][0]["loc"] == loc, (path, problem)
