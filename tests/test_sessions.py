"""Console sessions (api.sessions, engine.access): an API key exchanged for an HttpOnly,
SameSite=Strict cookie; CSRF on cookie writes and cookie sockets; logout, key revocation and
expiry end a session; another org's session sees nothing of this one's. In-process app on
real PostgreSQL; the socket on a real loopback server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
import socketio  # type: ignore[import-untyped]
import sqlalchemy as sa

from ator import Ator, Scope
from ator.api.app import create_app
from ator.security.sessions import hash_session
from tests.realtime_util import member_key, serve


@pytest.fixture
async def app(make_ator: Any) -> AsyncIterator[tuple[Any, Ator, str]]:
    async with make_ator(rate_limit_per_minute=0) as runtime:
        org = await runtime.create_org("sessions")
        key = await member_key(runtime, _scope(org), "admin")
        application = create_app(runtime.settings, runtime=runtime)
        application.state.ator = runtime
        yield application, runtime, key


def _scope(org: Any) -> Scope:
    return Scope(org.id)


def _client(app: Any, base: str = "http://ator") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base)


async def _login(client: httpx.AsyncClient, key: str) -> dict[str, Any]:
    client.cookies.clear()
    r = await client.post("/v1/sessions", json={"key": key})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def test_login_sets_an_httponly_strict_cookie_and_returns_no_secret_but_csrf(
    app: Any,
) -> None:
    application, _, key = app
    async with _client(application) as client:
        r = await client.post("/v1/sessions", json={"key": key})
        assert r.status_code == 201
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("ator_session=ators_")
        lowered = cookie.lower()
        assert "httponly" in lowered and "samesite=strict" in lowered and "path=/" in lowered
        assert "secure" not in lowered  # plain http: a Secure cookie would never come back
        body = r.json()
        assert key not in r.text and cookie.split(";")[0].split("=", 1)[1] not in r.text
        assert body["role"] == "admin" and len(body["csrf_token"]) == 64
        me = (await client.get("/v1/sessions/current")).json()
        assert me["csrf_token"] == body["csrf_token"] and me["org_id"] == body["org_id"]
    async with _client(application, "https://ator") as client:
        r = await client.post("/v1/sessions", json={"key": key})
        assert "secure" in r.headers["set-cookie"].lower()


async def test_cookie_writes_need_the_csrf_token(app: Any) -> None:
    application, _, key = app
    async with _client(application) as client:
        csrf = (await _login(client, key))["csrf_token"]
        body = {"name": "s", "provider": "scripted", "model": "scripted"}
        assert (await client.get("/v1/setups")).status_code == 200  # reads need none
        for headers in ({}, {"X-CSRF-Token": "0" * 64}):
            r = await client.post("/v1/setups", json=body, headers=headers)
            assert r.status_code == 403 and r.json()["code"] == "csrf_failed"
        assert (await client.get("/v1/setups")).json()["data"] == []  # nothing was written
        r = await client.post("/v1/setups", json=body, headers={"X-CSRF-Token": csrf})
        assert r.status_code == 201, r.text
        # An API key needs no CSRF token, even next to a cookie: browsers never add it.
        r = await client.post("/v1/setups", json={**body, "name": "t"},
                              headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 201, r.text


async def test_logout_revoking_the_key_and_expiry_end_a_session(app: Any) -> None:
    application, runtime, key = app
    async with _client(application) as client:
        csrf = (await _login(client, key))["csrf_token"]
        token = client.cookies["ator_session"]
        r = await client.delete("/v1/sessions/current", headers={"X-CSRF-Token": csrf})
        assert r.status_code == 204 and 'ator_session=""' in r.headers["set-cookie"]
        client.cookies.clear()
        client.cookies.set("ator_session", token)  # a client that kept the old value
        r = await client.get("/v1/setups")
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"

        await _login(client, key)
        token = client.cookies["ator_session"]
        await runtime.db.write(sa.text(
            "UPDATE sessions SET expires_at = now() - interval '1 second' WHERE hash = :h"),
            {"h": hash_session(token)})
        assert (await client.get("/v1/setups")).status_code == 401  # expired

        await runtime.db.write(sa.text(
            "UPDATE sessions SET expires_at = now() - interval '2 days' WHERE hash = :h"),
            {"h": hash_session(token)})
        await _login(client, key)  # clears the key's sessions that ended days ago
        rows = await runtime.db.read(sa.text("SELECT 1 FROM sessions WHERE hash = :h"),
                                     {"h": hash_session(token)})
        assert rows == []
        assert (await client.get("/v1/setups")).status_code == 200
        me = (await client.get("/v1/sessions/current")).json()
        other = await member_key(runtime, _scope_of(me), "admin")
        r = await client.delete(f"/v1/api-keys/{me['key_id']}",
                                headers={"Authorization": f"Bearer {other}"})
        assert r.status_code == 200, r.text
        assert (await client.get("/v1/setups")).status_code == 401  # its key was revoked


def _scope_of(me: dict[str, Any]) -> Scope:
    return Scope(UUID(me["org_id"]))


async def test_a_session_sees_only_its_org_and_cannot_beget_sessions(app: Any) -> None:
    application, runtime, key = app
    other_org = await runtime.create_org("other")
    other_key = await member_key(runtime, _scope(other_org), "admin")
    async with _client(application) as mine, _client(application) as theirs:
        csrf = (await _login(mine, key))["csrf_token"]
        setup = (await mine.post("/v1/setups", headers={"X-CSRF-Token": csrf}, json={
            "name": "s", "provider": "scripted", "model": "scripted"})).json()
        await _login(theirs, other_key)
        assert (await theirs.get(f"/v1/setups/{setup['id']}")).status_code == 404
        token = mine.cookies["ator_session"]
        r = await theirs.post("/v1/sessions", json={"key": token})
        assert r.status_code == 401


async def test_login_input_is_validated_and_attempts_are_limited(app: Any) -> None:
    application, _, _key = app
    async with _client(application) as client:
        for body in ({}, {"key": "x" * 201}, {"key": 5}, {"key": "k", "extra": 1}):
            r = await client.post("/v1/sessions", json=body)
            assert r.status_code == 422, (body, r.text)
        codes = [(await client.post("/v1/sessions", json={"key": "ator_00000000_nope"}))
                 .status_code for _ in range(31)]
        assert codes[:30] == [401] * 30 and codes[30] == 429


async def test_a_socket_rides_the_cookie_only_with_its_csrf_token_and_origin(
    app: Any,
) -> None:
    application, runtime, key = app
    application.state.sockets.attach(runtime)
    try:
        async with serve(application) as base, _client(application) as client:
            csrf = (await _login(client, key))["csrf_token"]
            cookie = f"ator_session={client.cookies['ator_session']}"

            async def connect(auth: Any, origin: str | None = None) -> Any:
                sio = socketio.AsyncClient(reconnection=False)
                refused: list[Any] = []
                sio.on("connect_error", lambda data: refused.append(data))
                headers = {"Cookie": cookie, **({"Origin": origin} if origin else {})}
                try:
                    await sio.connect(base, transports=["websocket"], headers=headers,
                                      auth=auth, wait_timeout=10)
                except socketio.exceptions.ConnectionError:
                    if sio.eio.http is not None:  # refused before the handshake
                        await sio.eio.http.close()
                    return refused or ["refused"]
                await sio.disconnect()
                return None

            assert await connect({"csrf": csrf}) is None
            assert await connect({"csrf": csrf}, origin=base) is None  # the console's origin
            refused = await connect(None)
            assert refused and refused[0]["data"]["code"] == "csrf_failed", refused
            refused = await connect({"csrf": "f" * 64})
            assert refused and refused[0]["data"]["code"] == "csrf_failed", refused
            assert await connect({"csrf": csrf}, origin="https://evil.example") is not None
    finally:
        await application.state.sockets.close()


async def test_the_console_is_served_with_cache_headers_and_a_fallback(
    make_ator: Any, tmp_path: Path,
) -> None:
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<!doctype html><div id=app></div>")
    (tmp_path / "assets" / "index-abc.js").write_text("console.log(1)")
    (tmp_path.parent / "secret.txt").write_text("TOPSECRET")
    async with make_ator() as runtime:
        for dist, built in ((tmp_path, True), (tmp_path / "missing", False)):
            application = create_app(runtime.settings.model_copy(update={"web_dir": dist}),
                                     runtime=runtime)
            application.state.ator = runtime
            async with _client(application) as client:
                r = await client.get("/")
                assert r.status_code == 307 and r.headers["location"] == "/ui/"
                r = await client.get("/ui/threads/123")
                if not built:
                    assert r.status_code == 503 and "make install" in r.text
                    continue
                assert r.status_code == 200 and "id=app" in r.text
                assert r.headers["cache-control"] == "no-cache"
                assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
                r = await client.get("/ui/assets/index-abc.js")
                assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
                assert (await client.get("/ui/assets/gone.js")).status_code == 404
                r = await client.get("/ui/..%2Fsecret.txt")
                assert r.status_code == 404 and "TOPSECRET" not in r.text
