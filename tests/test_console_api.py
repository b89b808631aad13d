"""The routes the web console reads to open a chat and fill its forms, in-process (ASGI
transport, real PostgreSQL): a thread's history paged backwards (`before`), the thread list
without subagent threads (`roots_only`), and the model catalog. The console itself is
driven in a real browser in tests/e2e/test_console_ux.py."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator import Ator
from tests.conftest import ended, operator_client, wait_for_event


@pytest.fixture
async def api(make_ator: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=10_000) as made:
        yield made


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _org(client: httpx.AsyncClient, operator: str) -> tuple[str, Any]:
    """A new org's admin key and its scope."""
    from ator.store.scope import Scope

    org = (await client.post("/v1/orgs", json={"name": f"o-{uuid.uuid4().hex[:6]}"},
                             headers=auth(operator))).json()
    made = await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(operator),
                             json={"name": "first", "role": "admin", "email": "a@o"})
    assert made.status_code == 201, made.text
    return str(made.json()["key"]), Scope(uuid.UUID(org["id"]))


async def _setup(client: httpx.AsyncClient, key: str, *steps: dict[str, Any]) -> str:
    made = await client.post("/v1/setups", headers=auth(key), json={
        "name": f"s-{uuid.uuid4().hex[:6]}", "provider": "scripted", "model": "scripted",
        "config": {"script": list(steps), "caps": {"max_steps": 100}}})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


async def _thread(client: httpx.AsyncClient, key: str, setup_id: str) -> str:
    made = await client.post("/v1/threads", headers=auth(key), json={"setup_id": setup_id})
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def _problem(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


async def test_history_pages_backwards_from_before(api: Any) -> None:
    client, operator, runtime = api
    key, scope = await _org(client, operator)
    steps = [{"text": f"step {i}", "tool_calls": [{"name": "calculator",
                                                   "input": {"expression": f"{i} + 1"}}]}
             for i in range(20)]
    thread = await _thread(client, key, await _setup(client, key, *steps, {"text": "end"}))
    posted = await client.post(f"/v1/threads/{thread}/messages", headers=auth(key),
                               json={"text": "go"})
    assert posted.status_code == 202, posted.text
    await wait_for_event(runtime, scope, uuid.UUID(thread), ended)
    events = f"/v1/threads/{thread}/events"
    everything = (await client.get(events, headers=auth(key), params={"limit": 1000})).json()
    seqs = [e["seq"] for e in everything["data"]]
    assert len(seqs) > 40 and seqs == list(range(1, len(seqs) + 1))

    # The latest page, then each older one, until the first event: all of them, once.
    pages: list[list[int]] = []
    before = seqs[-1] + 1
    while True:
        page = (await client.get(events, headers=auth(key),
                                 params={"before": before, "limit": 15})).json()
        got = [e["seq"] for e in page["data"]]
        assert got == sorted(got) and len(got) <= 15 and got[-1] == before - 1
        assert page["data"] == everything["data"][got[0] - 1:got[-1]]  # same wire format
        pages.append(got)
        if not page["has_older"]:
            break
        before = got[0]
    assert pages[0] == seqs[-15:]
    assert [s for p in reversed(pages) for s in p] == seqs
    assert pages[-1][0] == 1

    # Below the first event there is nothing; above the last, the latest page.
    empty = (await client.get(events, headers=auth(key), params={"before": 1})).json()
    assert empty == {"data": [], "last_seq": None, "has_older": False}
    huge = (await client.get(events, headers=auth(key),
                             params={"before": 2**62, "limit": 3})).json()
    assert [e["seq"] for e in huge["data"]] == seqs[-3:] and huge["has_older"]


async def test_history_backwards_refuses_bad_input_and_other_orgs(api: Any) -> None:
    client, operator, _ = api
    key, _scope = await _org(client, operator)
    other, _ = await _org(client, operator)
    thread = await _thread(client, key, await _setup(client, key, {"text": "hi"}))
    events = f"/v1/threads/{thread}/events"
    for params in ({"before": 0}, {"before": -3}, {"before": "x"}, {"before": 2**63},
                   {"before": 5, "limit": 0}, {"before": 5, "limit": 1001}):
        _problem(await client.get(events, headers=auth(key), params=params),
                 422, "validation_failed")
    for params in ({"before": 5, "wait": 1}, {"before": 5, "after_seq": 2}):
        _problem(await client.get(events, headers=auth(key), params=params),
                 422, "invalid_query")
    _problem(await client.get(events, headers=auth(other), params={"before": 5}),
             404, "not_found")
    _problem(await client.get(f"/v1/threads/{uuid.uuid4()}/events", headers=auth(key),
                              params={"before": 5}), 404, "not_found")


async def test_the_thread_list_can_leave_subagent_threads_out(api: Any) -> None:
    client, operator, runtime = api
    key, scope = await _org(client, operator)
    child_setup = await _setup(client, key, {"text": "child done"})
    parent = await _thread(client, key, await _setup(client, key, {"tool_calls": [
        {"name": "agent_spawn", "input": {"title": "helper", "task": "help",
                                          "setup_id": child_setup}}]}, {"text": "spawned"}))
    await client.post(f"/v1/threads/{parent}/messages", headers=auth(key), json={"text": "go"})
    first = await wait_for_event(runtime, scope, uuid.UUID(parent), ended)
    # the child's result wakes the parent once more: let that turn end too
    await wait_for_event(runtime, scope, uuid.UUID(parent), ended, after_seq=first.seq)

    every = (await client.get("/v1/threads", headers=auth(key))).json()["data"]
    child = next(t for t in every if t["parent_id"] == parent)
    assert child["title"] == "helper" and child["depth"] == 1
    roots = (await client.get("/v1/threads", headers=auth(key),
                              params={"roots_only": "true"})).json()["data"]
    assert [t["id"] for t in roots] == [parent]
    assert all(t["parent_id"] is None for t in roots)
    _problem(await client.get("/v1/threads", headers=auth(key),
                              params={"roots_only": "maybe"}), 422, "validation_failed")


async def test_the_catalog_lists_providers_models_prices_and_windows(api: Any) -> None:
    client, operator, _ = api
    key, _scope = await _org(client, operator)
    viewer = (await client.post("/v1/api-keys", headers=auth(key), json={
        "name": "v", "role": "viewer", "email": "v@o"})).json()["key"]
    _problem(await client.get("/v1/catalog/models"), 401, "unauthenticated")
    got = await client.get("/v1/catalog/models", headers=auth(viewer))
    assert got.status_code == 200, got.text
    providers = {p["id"]: p for p in got.json()["data"]}
    assert list(providers) == ["anthropic", "openai", "local", "scripted"]
    anthropic = providers["anthropic"]
    assert anthropic["server_key"] is False  # this runtime has no process-wide key
    assert anthropic["models"][0]["id"] == "claude-haiku-4-5"  # the default comes first
    haiku = anthropic["models"][0]
    assert haiku["context_window"] == 200_000 and haiku["planned_window"] == 200_000
    assert haiku["price"] == {"input_mtok": "1", "output_mtok": "5",
                              "cache_read_mtok": "0.1", "cache_write_mtok": "1.25"}
    openai = {m["id"]: m for m in providers["openai"]["models"]}
    assert "gpt-4o-mini" in openai and "ada" not in openai  # not a chat model ator prices
    assert all(m["price"] is not None for p in providers.values() for m in p["models"])
    assert providers["scripted"]["models"][0]["price"]["input_mtok"] == "0"
