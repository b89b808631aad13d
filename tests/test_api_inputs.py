"""Tenant input over the HTTP API (in-process app, real PostgreSQL): a setup's config and tool
policy are checked on create and on patch with 422s naming the field, what GET returns can be
PATCHed back, caps are not redacted, and free-form JSON is bounded so that everything stored
can be read back."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from ator.store import setups as setup_store
from tests.test_api import _org_with_admin, api, auth

__all__ = ["api"]  # the fixture, imported for this module's tests

SCRIPTED = {"name": "s", "provider": "scripted", "model": "scripted"}


async def _admin(api: Any, name: str) -> tuple[httpx.AsyncClient, dict[str, str]]:
    client, operator, _ = api
    return client, auth(await _org_with_admin(client, operator, name))


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    return body


SETUP_REFUSALS: dict[str, tuple[dict[str, Any], int, str, list[str] | None]] = {
    "clear api_key": ({"provider": "anthropic", "config": {"api_key": "sk-ant-x"}},
                      422, "secret_in_config", ["config", "api_key"]),
    "api_key in an object": ({"provider": "anthropic", "config": {"api_key": {"v": "sk"}}},
                             422, "secret_in_config", ["config", "api_key"]),
    "api_key as a number": ({"provider": "openai", "config": {"api_key": 42}},
                            422, "secret_in_config", ["config", "api_key"]),
    "Cookie header": ({"provider": "openai", "config": {"headers": {"Cookie": "s=1"}}},
                      422, "secret_in_config", ["config", "headers", "Cookie"]),
    "*-Key header": ({"provider": "openai", "config": {"headers": {"X-My-Key": "k"}}},
                     422, "secret_in_config", ["config", "headers", "X-My-Key"]),
    "userinfo in base_url": (
        {"provider": "openai", "config": {"base_url": "https://a:b@llm.example/v1"}},
        422, "secret_in_config", ["config", "base_url"]),
    # Issue 17 S10: a credential in the query is one in clear, like a clear api_key.
    "api_key in the base_url query": (
        {"provider": "openai", "config": {"base_url": "https://llm.example/v1?api_key=k1"}},
        422, "secret_in_config", ["config", "base_url"]),
    "key in the base_url query": (
        {"provider": "anthropic", "config": {"base_url": "https://llm.example/?v=1&key=AIz",
                                             "api_key": "secret:k"}},
        422, "secret_in_config", ["config", "base_url"]),
    "Host header": ({"provider": "openai", "config": {"headers": {"Host": "x"}}},
                    422, "forbidden_header", ["config", "headers", "Host"]),
    "unknown key": ({"provider": "scripted", "config": {"note": "x"}},
                    422, "invalid_config", ["config", "note"]),
    "timeout as text": ({"provider": "anthropic", "config": {"timeout": "soon"}},
                        422, "invalid_config", ["config", "timeout"]),
    "timeout over the ceiling": ({"provider": "anthropic", "config": {"timeout": 1e308}},
                                 422, "invalid_config", ["config", "timeout"]),
    "headers not strings": ({"provider": "openai", "config": {"headers": {"X-A": 1}}},
                            422, "invalid_config", ["config", "headers", "X-A"]),
    "base_url not http": ({"provider": "openai", "config": {"base_url": "file:///etc"}},
                          422, "invalid_config", ["config", "base_url"]),
    "bad cap": ({"provider": "scripted", "config": {"caps": {"max_stepz": 3}}},
                422, "invalid_cap", ["config", "caps"]),
    "model_path": ({"provider": "local", "config": {"model_path": "/etc/shadow"}},
                   422, "model_path_not_allowed", ["config", "model_path"]),
    "deep config": ({"provider": "scripted", "config": {"caps": json.loads(
        '{"a": ' * 40 + "1" + "}" * 40)}}, 422, "too_deep", None),
    "big config": ({"provider": "scripted", "config": {"script": [{"text": "x" * 300_000}]}},
                   422, "too_large", ["config"]),
    "tool_policy as a string list": ({"tool_policy": {"allow": "calculator"}},
                                     422, "invalid_tool_policy", ["tool_policy", "allow"]),
    "tool_policy unknown key": ({"tool_policy": {"only": ["calculator"]}},
                                422, "invalid_tool_policy", ["tool_policy", "only"]),
    "NUL in persona": ({"persona": "a\x00b"}, 422, "unstorable_value", ["persona"]),
}


@pytest.mark.parametrize("case", list(SETUP_REFUSALS))
async def test_a_bad_setup_is_a_422_naming_the_field_on_create_and_on_patch(
    api: Any, case: str
) -> None:
    client, admin = await _admin(api, f"refusal {case}")
    body, status, code, loc = SETUP_REFUSALS[case]
    created = await client.post("/v1/setups", headers=admin, json={**SCRIPTED, **body})
    found = problem(created, status, code)
    if loc is not None:
        assert found["errors"][0]["loc"] == loc
        assert found["detail"].startswith(".".join(loc))
    # The same change as a PATCH of a good setup is refused the same way and changes nothing.
    good = (await client.post("/v1/setups", headers=admin, json=SCRIPTED)).json()
    patched = await client.patch(f"/v1/setups/{good['id']}", headers=admin,
                                 json={k: v for k, v in body.items()})
    assert problem(patched, status, code)["errors"] == found["errors"]
    after = (await client.get(f"/v1/setups/{good['id']}", headers=admin)).json()
    assert after == good


async def test_patch_validates_the_setup_as_it_would_be(api: Any) -> None:
    client, admin = await _admin(api, "combined")
    setup = (await client.post("/v1/setups", headers=admin, json={
        **SCRIPTED, "config": {"script": [{"text": "hi"}]}})).json()
    # The config is fine for `scripted`, not for `anthropic`: changing only the provider is
    # refused, because the stored config would no longer be valid.
    moved = await client.patch(f"/v1/setups/{setup['id']}", headers=admin,
                               json={"provider": "anthropic"})
    assert problem(moved, 422, "invalid_config")["errors"][0]["loc"] == ["config", "script"]
    both = await client.patch(f"/v1/setups/{setup['id']}", headers=admin, json={
        "provider": "anthropic", "config": {"api_key": "secret:k"}})
    assert both.status_code == 200, both.text
    assert both.json()["version"] == setup["version"] + 1


async def test_get_then_patch_the_same_config_round_trips(api: Any) -> None:
    client, admin = await _admin(api, "round trip")
    _, _, runtime = api
    config = {
        "caps": {"max_output_tokens": 256, "max_turn_tokens": 5000, "max_steps": 4},
        "prompt_cache": True,
        # A credential-looking string in free text is redacted on every view...
        "script": [{"text": "sk-looks-like-a-key"}, {"text": "the author is ann"}],
    }
    made = (await client.post("/v1/setups", headers=admin, json={**SCRIPTED, "config": config}
                              )).json()
    shown = (await client.get(f"/v1/setups/{made['id']}", headers=admin)).json()
    # Caps are caps, not credentials.
    assert shown["config"]["caps"] == config["caps"]
    assert shown["config"]["script"] == [{"text": "[redacted]"}, {"text": "the author is ann"}]
    # ... and sending the config back exactly as shown is accepted and keeps the hidden value.
    patched = await client.patch(f"/v1/setups/{made['id']}", headers=admin, json={
        "config": shown["config"], "tool_policy": shown["tool_policy"]})
    assert patched.status_code == 200, patched.text
    assert patched.json()["config"] == shown["config"]
    org_id = (await client.get("/v1/orgs", headers=admin)).json()["data"][0]["id"]
    from uuid import UUID

    from ator.store.scope import Scope

    stored = await setup_store.get_setup(runtime.db, Scope(UUID(org_id)), UUID(made["id"]))
    assert stored.config == config


async def test_tenant_endpoints_can_be_switched_off(make_ator: Any) -> None:
    from ator.api.app import create_app
    from ator.store import keys as key_store
    from ator.store import orgs as org_store
    from ator.store.scope import Scope

    async with make_ator(rate_limit_per_minute=1000, tenant_endpoints=False) as runtime:
        app = create_app(runtime.settings, runtime=runtime)
        app.state.ator = runtime
        org = await runtime.create_org("no endpoints")
        user = await org_store.create_user(runtime.db, Scope(org.id), "a@x", "admin")
        _, key = await key_store.create_key(runtime.db, Scope(org.id), user_id=user,
                                            name="k", role="admin")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://ator") as client:
            refused = await client.post("/v1/setups", headers=auth(key), json={
                "name": "s", "provider": "openai", "model": "m",
                "config": {"base_url": "https://llm.example/v1", "api_key": "secret:k"}})
            problem(refused, 403, "tenant_endpoints_disabled")
            plain = await client.post("/v1/setups", headers=auth(key), json={
                "name": "s", "provider": "openai", "model": "m",
                "config": {"api_key": "secret:k"}})
            assert plain.status_code == 201, plain.text
            headers = await client.patch(f"/v1/setups/{plain.json()['id']}", headers=auth(key),
                                         json={"config": {"headers": {"X-A": "1"}}})
            problem(headers, 403, "tenant_endpoints_disabled")


def deep_json(depth: int) -> str:
    return '{"a": ' * (depth - 1) + "{}" + "}" * (depth - 1)


@pytest.mark.parametrize("depth", [17, 500, 999])
async def test_deep_metadata_is_refused_and_every_thread_stays_readable(
    api: Any, depth: int
) -> None:
    client, admin = await _admin(api, f"deep {depth}")
    setup = (await client.post("/v1/setups", headers=admin, json=SCRIPTED)).json()
    raw_json = {**admin, "content-type": "application/json"}

    def body(depth: int) -> str:
        return f'{{"setup_id": "{setup["id"]}", "metadata": {deep_json(depth)}}}'

    made = await client.post("/v1/threads", headers=raw_json, content=body(depth))
    # Refused as too deep by the metadata bound, or (999) as unparsable by the JSON reader.
    assert made.status_code in (400, 422), made.text
    assert made.json()["code"] in ("too_deep", "bad_request")
    # The deepest that is accepted reads back, alone and in a list.
    ok = await client.post("/v1/threads", headers=raw_json, content=body(16))
    assert ok.status_code == 201, ok.text
    got = await client.get(f"/v1/threads/{ok.json()['id']}", headers=admin)
    assert got.status_code == 200
    listed = await client.get("/v1/threads?limit=200", headers=admin)
    assert listed.status_code == 200 and len(listed.json()["data"]) == 1


async def test_thread_metadata_is_bounded_so_a_page_of_threads_stays_small(api: Any) -> None:
    client, admin = await _admin(api, "big metadata")
    setup = (await client.post("/v1/setups", headers=admin, json=SCRIPTED)).json()
    # 10 MB never reaches the route: the body limit refuses it at the edge.
    huge = await client.post("/v1/threads", headers=admin, json={
        "setup_id": setup["id"], "metadata": {"blob": "x" * (10 * 1024 * 1024)}})
    assert problem(huge, 413, "payload_too_large")
    # Under the body limit but over the field's own bound: a 422 naming the field.
    big = await client.post("/v1/threads", headers=admin, json={
        "setup_id": setup["id"], "metadata": {"blob": "x" * (100 * 1024)}})
    assert problem(big, 422, "too_large")["errors"][0]["loc"] == ["metadata"]
    # 20 threads with the largest metadata allowed: the list page is bounded by the limit.
    largest = {"blob": "x" * (64 * 1024 - 20)}
    for _ in range(20):
        made = await client.post("/v1/threads", headers=admin,
                                 json={"setup_id": setup["id"], "metadata": largest})
        assert made.status_code == 201, made.text
    page = await client.get("/v1/threads?limit=200", headers=admin)
    assert len(page.json()["data"]) == 20
    assert len(page.content) < 20 * 70 * 1024  # vs 200 MB with 10 MB metadata each


THREAD_REFUSALS: dict[str, tuple[dict[str, Any], str, list[str]]] = {
    "NaN-free but NUL key": ({"metadata": {"a\x00": 1}}, "unstorable_value",
                             ["metadata", "a\x00"]),
    "too many values": ({"metadata": {"k": list(range(3000))}}, "too_many_items",
                        ["metadata"]),
}


@pytest.mark.parametrize("case", list(THREAD_REFUSALS))
async def test_other_unreadable_metadata_is_refused(api: Any, case: str) -> None:
    client, admin = await _admin(api, f"metadata {case}")
    setup = (await client.post("/v1/setups", headers=admin, json=SCRIPTED)).json()
    extra, code, loc = THREAD_REFUSALS[case]
    made = await client.post("/v1/threads", headers=admin,
                             json={"setup_id": setup["id"], **extra})
    assert problem(made, 422, code)["errors"][0]["loc"] == loc


async def test_secrets_values_are_bounded(api: Any) -> None:
    client, admin = await _admin(api, "secrets")
    big = await client.put("/v1/secrets/k", headers=admin, json={"value": "x" * 20_001})
    assert big.status_code == 422
    ok = await client.put("/v1/secrets/k", headers=admin, json={"value": "x" * 20_000})
    assert ok.status_code == 204


async def test_the_python_api_is_bounded_too(api: Any) -> None:
    from ator.errors import ValidationFailed
    from ator.store.scope import Scope

    _, _, runtime = api
    scope = Scope((await runtime.create_org("python api")).id)
    with pytest.raises(ValidationFailed) as name:
        await runtime.put_secret(scope, "no spaces allowed", "v")
    assert name.value.code == "invalid_secret_name"
    with pytest.raises(ValidationFailed) as value:
        await runtime.put_secret(scope, "k", "v" * 20_001)
    assert value.value.code == "too_long"
    setup = await runtime.create_setup(scope, name="s", provider="scripted", model="m")
    with pytest.raises(ValidationFailed) as title:
        await runtime.create_thread(scope, setup.id, title="t" * 501)
    assert title.value.code == "too_long"
    with pytest.raises(ValidationFailed) as persona:
        await runtime.update_setup(scope, setup.id, persona="p" * 50_001)
    assert persona.value.code == "too_long"


async def test_an_update_validated_against_a_stale_version_is_not_applied(api: Any) -> None:
    from ator.errors import Conflict
    from ator.store.scope import Scope

    _, _, runtime = api
    scope = Scope((await runtime.create_org("stale")).id)
    setup = await runtime.create_setup(scope, name="s", provider="scripted", model="m")
    moved = await runtime.update_setup(scope, setup.id, model="m2")
    assert moved.version == setup.version + 1
    # What a concurrent request validated against the old version must not land.
    with pytest.raises(Conflict) as err:
        await setup_store.update_setup(runtime.db, scope, setup.id,
                                       expected_version=setup.version, provider="anthropic")
    assert err.value.code == "setup_changed"
    assert (await setup_store.get_setup(runtime.db, scope, setup.id)).provider == "scripted"


async def test_a_base_url_query_without_a_credential_is_kept_and_an_old_one_is_shown_redacted(
    api: Any,
) -> None:
    """Issue 17 S10: only credential-named parameters are refused (Azure's `api-version`
    stays), and a row stored before the rule shows its credential to no viewer."""
    from ator.store.scope import Scope

    client, admin = await _admin(api, "query rule")
    azure = {"provider": "openai", "config": {
        "base_url": "https://llm.example/openai?api-version=2024-10-21"}}
    made = await client.post("/v1/setups", headers=admin, json={**SCRIPTED, **azure})
    assert made.status_code == 201, made.text
    assert made.json()["config"]["base_url"].endswith("?api-version=2024-10-21")
    _, _, runtime = api
    org_id = (await client.get("/v1/sessions/current", headers=admin)).json()["org_id"]
    old = await setup_store.create_setup(
        runtime.db, Scope(uuid.UUID(org_id)), name="old", provider="openai",
        model="m", config={"base_url": "https://llm.example/v1?api_key=plainsecret&v=2"})
    shown = (await client.get(f"/v1/setups/{old.id}", headers=admin)).text
    assert "plainsecret" not in shown
    assert "?api_key=[redacted]&v=2" in shown
