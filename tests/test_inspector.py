"""Prompt layers and the inspector over the HTTP API (in-process ASGI, real PostgreSQL, the
real anthropic SDK against the wire-level fake with its prompt cache simulated): the org
policy and thread instructions are edited by role and versioned, reach the model as
labelled layers, and every model call can be inspected — layer hashes, cache tokens, and a
diff that names the layer that broke the cache."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ator import Ator
from ator.store import keys as key_store
from ator.testing.anthropic_wire import AnthropicWireFake
from ator.testing.wire import Reply, ToolCall
from tests.conftest import operator_client, wait_for_event
from tests.test_api import _org_with_admin, auth


@pytest.fixture
async def api(make_ator: Any) -> AsyncIterator[tuple[httpx.AsyncClient, str, Ator]]:
    async with operator_client(make_ator, rate_limit_per_minute=1000,
                               egress_allow=("127.0.0.1",)) as made:
        yield made


async def _key(client: httpx.AsyncClient, admin: str, role: str, email: str) -> str:
    made = await client.post("/v1/api-keys", headers=auth(admin),
                             json={"name": email, "role": role, "email": email})
    assert made.status_code == 201, made.text
    return str(made.json()["key"])


def _problem(response: httpx.Response, status: int, code: str | None = None) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    if code is not None:
        assert response.json()["code"] == code, response.json()


async def test_policy_is_edited_by_admins_and_versioned(api: Any) -> None:
    client, operator, _ = api
    admin = await _org_with_admin(client, operator, "pol-a")
    member = await _key(client, admin, "member", "m@a")
    other = await _org_with_admin(client, operator, "pol-b")

    start = (await client.get("/v1/org/policy", headers=auth(member))).json()
    assert start == {"layer": "org_policy", "text": "", "version": 0, "replace": False}
    _problem(await client.put("/v1/org/policy", headers=auth(member), json={"text": "x"}),
             403)
    one = await client.put("/v1/org/policy", headers=auth(admin), json={"text": "Be formal."})
    assert one.json() == {"layer": "org_policy", "text": "Be formal.", "version": 1,
                          "replace": False}
    two = await client.put("/v1/org/policy", headers=auth(admin),
                           json={"text": "Only French.", "replace": True, "if_version": 1})
    assert (two.json()["version"], two.json()["replace"]) == (2, True)
    # An edit based on a stale version is refused, not silently lost.
    _problem(await client.put("/v1/org/policy", headers=auth(admin),
                              json={"text": "late", "if_version": 1}), 409,
             "version_conflict")
    versions = (await client.get("/v1/org/policy/versions", headers=auth(member))).json()
    assert [(v["version"], v["text"]) for v in versions["data"]] == [
        (2, "Only French."), (1, "Be formal.")]
    # Another org's policy is its own.
    assert (await client.get("/v1/org/policy", headers=auth(other))).json()["version"] == 0
    # Bad input is problem+json.
    _problem(await client.put("/v1/org/policy", headers=auth(admin),
                              json={"text": "x" * 50_001}), 422)
    _problem(await client.put("/v1/org/policy", headers=auth(admin),
                              json={"text": "x", "surprise": 1}), 422)
    _problem(await client.put("/v1/org/policy", headers=auth(admin),
                              json={"text": "nul\u0000"}), 422)
    _problem(await client.put("/v1/org/policy", headers=auth(admin),
                              content=b"{not json", ), 422)
    assert (await client.get("/v1/org/policy", headers=auth(admin))).json()["version"] == 2


async def test_thread_instructions_are_edited_by_members_and_versioned(api: Any) -> None:
    client, operator, _ = api
    admin = await _org_with_admin(client, operator, "ins-a")
    member = await _key(client, admin, "member", "m@ins")
    viewer = await _key(client, admin, "viewer", "v@ins")
    other = await _org_with_admin(client, operator, "ins-b")
    setup = (await client.post("/v1/setups", headers=auth(admin), json={
        "name": "s", "provider": "scripted", "model": "scripted"})).json()
    thread = (await client.post("/v1/threads", headers=auth(member), json={
        "setup_id": setup["id"], "instructions": "as created"})).json()
    path = f"/v1/threads/{thread['id']}/instructions"

    assert (await client.get(path, headers=auth(viewer))).json() == {
        "layer": "thread", "text": "as created", "version": 0}
    _problem(await client.put(path, headers=auth(viewer), json={"text": "x"}), 403)
    for n in (1, 2):
        put = await client.put(path, headers=auth(member), json={"text": f"edit {n}"})
        assert put.json()["version"] == n, put.text
    versions = (await client.get(f"{path}/versions", headers=auth(viewer))).json()["data"]
    assert [v["version"] for v in versions] == [2, 1]
    # Another org's thread (and a made-up one) is a 404, for reads and writes.
    for key in (other,):
        _problem(await client.get(path, headers=auth(key)), 404, "not_found")
        _problem(await client.put(path, headers=auth(key), json={"text": "mine"}), 404)
        _problem(await client.get(f"{path}/versions", headers=auth(key)), 404)
    _problem(await client.put(f"/v1/threads/{uuid.uuid4()}/instructions", headers=auth(admin),
                              json={"text": "x"}), 404)
    _problem(await client.put(path, headers=auth(member), json={"text": 5}), 422)
    assert (await client.get(path, headers=auth(member))).json()["text"] == "edit 2"


async def _turn_ids(client: httpx.AsyncClient, key: str, thread_id: str) -> list[str]:
    turns = (await client.get(f"/v1/threads/{thread_id}/turns", headers=auth(key))).json()
    return [t["id"] for t in reversed(turns["data"])]


async def test_the_inspector_names_the_layer_that_broke_the_cache(api: Any) -> None:
    client, operator, runtime = api
    admin = await _org_with_admin(client, operator, "insp-a")
    owner = await _key(client, admin, "member", "owner@insp")
    colleague = await _key(client, admin, "member", "colleague@insp")
    viewer = await _key(client, admin, "viewer", "viewer@insp")
    stranger = await _org_with_admin(client, operator, "insp-b")
    script = [Reply(tool_calls=[ToolCall("calculator", {"expression": "6*7"})],
                    usage=None),
              Reply(text="42", usage=None), Reply(text="still 42", usage=None)]
    async with AnthropicWireFake(script, prompt_cache=True) as fake:
        assert (await client.put("/v1/secrets/anthropic", headers=auth(admin),
                                 json={"value": "sk-ant-test"})).status_code == 204
        setup = (await client.post("/v1/setups", headers=auth(admin), json={
            "name": "s", "provider": "anthropic", "model": "claude-test-model",
            "persona": "You are Ada.",
            "config": {"base_url": fake.base_url, "api_key": "secret:anthropic"}})).json()
        await client.put("/v1/org/policy", headers=auth(admin), json={"text": "Policy one."})
        thread = (await client.post("/v1/threads", headers=auth(owner), json={
            "setup_id": setup["id"], "instructions": "Be brief."})).json()
        principal = await key_store.authenticate(runtime.db, owner)
        assert principal is not None
        thread_id = uuid.UUID(thread["id"])

        async def ask(text: str, after: int) -> int:
            sent = await client.post(f"/v1/threads/{thread_id}/messages", headers=auth(owner),
                                     json={"text": text})
            assert sent.status_code == 202, sent.text
            end = await wait_for_event(runtime, principal.scope, thread_id,
                                       lambda e: e.kind == "turn_ended", after_seq=after)
            assert end.data["status"] == "done", end.data
            return end.seq

        seq = await ask("what is 6*7?", 0)
        await client.put("/v1/org/policy", headers=auth(admin), json={"text": "Policy two."})
        await ask("and again?", seq)

    first, second = await _turn_ids(client, owner, thread["id"])
    calls = (await client.get(f"/v1/turns/{first}/calls", headers=auth(owner))).json()["data"]
    assert [c["step"] for c in calls] == [1, 2]
    layers = calls[0]["request"]["layers"]
    assert [x["name"] for x in layers] == ["core", "org_policy", "persona", "thread", "tools"]
    assert all(len(x["hash"]) == 16 and x["chars"] > 0 for x in layers)
    assert {x["name"]: x["version"] for x in layers}["org_policy"] == 1
    tools = {t["name"]: t for t in calls[0]["request"]["tools"]}
    assert tools["calculator"]["origin"] == "native" and tools["calculator"]["chars"] > 0
    assert tools["calculator"]["on_demand"] is False
    last_tool = len(calls[0]["request"]["tools"]) - 1
    assert calls[0]["request"]["breakpoints"] == ["system:4", f"tools:{last_tool}", "user:0"]
    assert calls[0]["request"]["request_bytes"] > 0
    assert calls[0]["ttft_ms"] is not None and calls[0]["latency_ms"] >= calls[0]["ttft_ms"]
    # Within the turn, the second call reads the first one's prefix from the cache.
    assert calls[0]["usage"]["cache_read_tokens"] == 0
    assert calls[0]["usage"]["cache_write_tokens"] > 0
    assert calls[1]["usage"]["cache_read_tokens"] > calls[0]["usage"]["cache_write_tokens"] / 2
    assert calls[1]["diff"]["cache_broken_by"] == []
    assert calls[1]["diff"]["previous_id"] == calls[0]["id"]
    assert calls[1]["usage"]["reported_input_tokens"] == sum(
        calls[1]["usage"][k] for k in ("input_tokens", "cache_read_tokens",
                                       "cache_write_tokens"))

    [after] = (await client.get(f"/v1/turns/{second}/calls", headers=auth(owner))).json()["data"]
    # The policy changed between the two turns: the diff names it, and the cache missed
    # everything from the system prompt on (only the tools, which come first, were read).
    assert after["diff"]["previous_id"] == calls[1]["id"]
    assert after["diff"]["cache_broken_by"] == ["layer:org_policy"]
    assert "config_hash" in after["diff"]["changed"]
    assert {x["name"]: x["version"] for x in after["request"]["layers"]}["org_policy"] == 2
    assert 0 < after["usage"]["cache_read_tokens"] < calls[1]["usage"]["cache_read_tokens"]
    assert after["usage"]["cache_write_tokens"] > 0
    sent = [b["text"] for b in fake.requests[-1].body["system"]]
    assert "## org_policy\nPolicy two." in sent and "## thread\nBe brief." in sent

    # The same call by id; the thread's creator and admins only, everyone else a 404.
    one = await client.get(f"/v1/calls/{after['id']}", headers=auth(admin))
    assert one.status_code == 200 and one.json()["diff"] == after["diff"]
    for key in (colleague, viewer, stranger):
        _problem(await client.get(f"/v1/turns/{second}/calls", headers=auth(key)), 404)
        _problem(await client.get(f"/v1/calls/{after['id']}", headers=auth(key)), 404)
    _problem(await client.get(f"/v1/turns/{uuid.uuid4()}/calls", headers=auth(admin)), 404)
    _problem(await client.get("/v1/calls/0", headers=auth(admin)), 422)
    _problem(await client.get("/v1/calls/abc", headers=auth(admin)), 422)
