"""Single sign-on against a real OpenID Connect provider (tests/oidc_provider.py, served on a
port; ator reaches it over HTTP through its egress guard): a person signs in and lands in
the right org with the role their group maps to, on the console's cookie session; a person
disabled at the provider is refused at the next refresh (and the session ends); a wrong
issuer, a replayed state, a code without its PKCE verifier and an email outside the org's
domain are each refused."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from ator.security.sessions import csrf_token
from tests.conftest import operator_client
from tests.oidc_provider import Person, Provider, running_provider


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class World:
    client: httpx.AsyncClient  # the ator app (in-process ASGI)
    idp: Provider
    org_id: str
    admin: str  # the org admin's API key


@pytest.fixture
async def world(make_ator: Any) -> AsyncIterator[World]:
    async with running_provider() as idp, operator_client(
            make_ator, egress_allow=("127.0.0.1",),
            rate_limit_per_minute=10_000) as (client, op, _ator):
        org = (await client.post("/v1/orgs", json={"name": f"sso-{uuid.uuid4().hex[:6]}"},
                                 headers=auth(op))).json()
        admin = (await client.post(f"/v1/orgs/{org['id']}/api-keys", headers=auth(op), json={
            "name": "admin", "role": "admin", "email": "root@acme.test"})).json()["key"]
        put = await client.put("/v1/org/sso", headers=auth(admin), json={
            "issuer": idp.issuer, "client_id": idp.client_id,
            "client_secret": idp.client_secret, "email_domain": "acme.test",
            "role_claim": "groups", "role_map": {"ator-admins": "admin",
                                                 "staff": "member"},
            "default_role": "viewer"})
        assert put.status_code == 200, put.text
        assert put.json()["has_client_secret"] is True and "client_secret" not in put.json()
        yield World(client, idp, org["id"], admin)


async def _to_idp(w: World) -> str:
    """Start a login at ator; the provider's answer (the callback URL, as a browser would
    be redirected to)."""
    start = await w.client.get(f"/v1/sso/{w.org_id}/login")
    assert start.status_code == 302, start.text
    async with httpx.AsyncClient() as browser:
        at_idp = await browser.get(start.headers["location"])
    assert at_idp.status_code == 302, at_idp.text
    return at_idp.headers["location"]


async def _callback(w: World, url: str) -> httpx.Response:
    parts = urlsplit(url)
    response = await w.client.get(f"{parts.path}?{parts.query}")
    w.client.cookies.clear()  # each request below names its session itself
    return response


def _session(token: str, *, write: bool = False) -> dict[str, str]:
    """The headers a browser sends with the session cookie (and the CSRF token on writes)."""
    headers = {"Cookie": f"ator_session={token}"}
    if write:
        headers["X-CSRF-Token"] = csrf_token(token)
    return headers


def _cookie(response: httpx.Response) -> str:
    (value,) = [v.split(";", 1)[0].split("=", 1)[1]
                for k, v in response.headers.multi_items() if k == "set-cookie"
                and v.startswith("ator_session=")]
    return value


async def test_a_person_signs_in_with_the_mapped_role_and_is_refused_once_disabled(
        world: World) -> None:
    w = world
    alice = Person("alice-1", "Alice@acme.test", groups=["staff", "ator-admins"])
    w.idp.person = alice
    done = await _callback(w, await _to_idp(w))
    assert done.status_code == 302, done.text
    assert done.headers["location"] == "/ui/"
    token = _cookie(done)
    who = await w.client.get("/v1/sessions/current", headers=_session(token))
    assert who.status_code == 200, who.text
    body = who.json()
    assert (body["org_id"], body["role"]) == (w.org_id, "admin")  # the highest mapped role
    assert body["csrf_token"] == csrf_token(token)
    assert body["sso"] is True  # the console refreshes this session
    # The PKCE verifier went with the code.
    exchange = [r for r in w.idp.token_requests if r["grant_type"] == "authorization_code"]
    assert exchange[-1]["code_verifier"]

    # Refreshing asks the provider again: still accepted, a new session.
    refreshed = await w.client.post("/v1/sessions/refresh", headers=_session(token, write=True))
    assert refreshed.status_code == 200, refreshed.text
    token = _cookie(refreshed)
    world.client.cookies.clear()

    alice.disabled = True  # removed at the identity provider
    refused = await w.client.post("/v1/sessions/refresh", headers=_session(token, write=True))
    assert (refused.status_code, refused.json()["code"]) == (401, "sso_refused")
    gone = await w.client.get("/v1/sessions/current", headers=_session(token))
    assert gone.status_code == 401
    # Signing in again is refused at the provider itself.
    again = await _to_idp(w)
    assert "error=access_denied" in again


async def test_a_person_without_a_mapped_group_gets_the_default_role(world: World) -> None:
    world.idp.person = Person("bob-2", "bob@acme.test", groups=["visitors"])
    done = await _callback(world, await _to_idp(world))
    who = await world.client.get("/v1/sessions/current",
                                 headers=_session(_cookie(done)))
    assert who.json()["role"] == "viewer"


async def test_a_replayed_state_is_refused(world: World) -> None:
    world.idp.person = Person("carol-3", "carol@acme.test")
    url = await _to_idp(world)
    assert (await _callback(world, url)).status_code == 302
    replay = await _callback(world, url)
    assert (replay.status_code, replay.json()["code"]) == (401, "sso_state_invalid")


async def test_an_id_token_from_another_issuer_is_refused(world: World) -> None:
    world.idp.person = Person("dave-4", "dave@acme.test")
    world.idp.issued_iss = "https://impostor.example"
    refused = await _callback(world, await _to_idp(world))
    assert (refused.status_code, refused.json()["code"]) == (401, "sso_token_invalid")
    assert "set-cookie" not in refused.headers


async def test_a_code_without_its_pkce_verifier_is_refused(world: World) -> None:
    """The code alone is worth nothing: the provider refuses it without the verifier ator
    kept (so a code intercepted on its way back cannot be redeemed by someone else)."""
    world.idp.person = Person("erin-5", "erin@acme.test")
    url = await _to_idp(world)
    code = parse_qs(urlsplit(url).query)["code"][0]
    async with httpx.AsyncClient() as thief:
        stolen = await thief.post(f"{world.idp.issuer}/token", data={
            "grant_type": "authorization_code", "code": code,
            "redirect_uri": url.split("?")[0], "client_id": world.idp.client_id},
            auth=(world.idp.client_id, world.idp.client_secret))
    assert (stolen.status_code, stolen.json()["error"]) == (400, "invalid_grant")
    # ator's own exchange of the same code, with its verifier, still works.
    assert (await _callback(world, url)).status_code == 302


async def test_an_email_outside_the_orgs_domain_is_refused(world: World) -> None:
    world.idp.person = Person("mallory-6", "mallory@elsewhere.test", groups=["ator-admins"])
    refused = await _callback(world, await _to_idp(world))
    assert (refused.status_code, refused.json()["code"]) == (401, "sso_person_refused")


async def test_sso_config_by_role_and_org(world: World) -> None:
    w = world
    got = await w.client.get("/v1/org/sso", headers=auth(w.admin))
    assert got.json()["issuer"] == w.idp.issuer and got.json()["configured"] is True
    bad = await w.client.put("/v1/org/sso", headers=auth(w.admin), json={
        "issuer": w.idp.issuer + "/", "client_id": "x"})
    assert (bad.status_code, bad.json()["code"]) == (422, "sso_invalid_issuer")
    not_sso = await w.client.post("/v1/sessions/refresh", headers=auth(w.admin))
    assert (not_sso.status_code, not_sso.json()["code"]) == (409, "sso_not_sso_session")
    missing = await w.client.get(f"/v1/sso/{uuid.uuid4()}/login")
    assert (missing.status_code, missing.json()["code"]) == (404, "sso_not_configured")
