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
from ator.coord import LocalCoordinator
from ator.engine.logins import ACCOUNT_FAILURES, PAIR_FAILURES, LoginThrottle
from ator.errors import RateLimited
from ator.security.sessions import csrf_token, hash_session, session_cookie_name
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
        assert me["sso"] is False  # a key's session: nothing to refresh
    async with _client(application, "https://ator") as client:
        r = await client.post("/v1/sessions", json={"key": key})
        assert "secure" in r.headers["set-cookie"].lower()


async def test_over_https_the_cookie_is_host_prefixed_and_only_it_is_read(app: Any) -> None:
    """Issue 17 S8: `__Host-` makes the browser keep the cookie only if Secure, Path=/ and
    without Domain, so a sibling subdomain cannot plant one; on plain http (localhost) the
    plain name stays, since a Secure cookie would never come back."""
    application, _, key = app
    async with _client(application, "https://ator") as client:
        r = await client.post("/v1/sessions", json={"key": key})
        assert r.status_code == 201
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("__Host-ator_session=ators_"), cookie
        attributes = [a.strip().lower() for a in cookie.split(";")[1:]]
        assert "secure" in attributes and "path=/" in attributes and "httponly" in attributes
        assert not any(a.startswith("domain") for a in attributes)
        token = client.cookies["__Host-ator_session"]
        assert (await client.get("/v1/sessions/current")).status_code == 200
        # The same session under the plain name is not read over https ...
        client.cookies.clear()
        client.cookies.set("ator_session", token)
        assert (await client.get("/v1/sessions/current")).status_code == 401
    # ... nor the prefixed name over http.
    async with _client(application) as plain:
        plain.cookies.set("__Host-ator_session", token)
        assert (await plain.get("/v1/sessions/current")).status_code == 401
        plain.cookies.clear()
        plain.cookies.set("ator_session", token)
        assert (await plain.get("/v1/sessions/current")).status_code == 200


@pytest.mark.parametrize("base", ["http://ator", "https://ator"])
async def test_an_api_key_is_not_a_session_cookie(app: Any, base: str) -> None:
    """Issue 17 S8: only a session may be the cookie's value. A key there (planted, or left
    by a script) authenticates nothing, for reads and for CSRF-tokened writes."""
    application, _, key = app
    async with _client(application, base) as client:
        client.cookies.set(session_cookie_name(base.startswith("https")), key)
        r = await client.get("/v1/sessions/current")
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
        r = await client.post("/v1/setups", headers={"X-CSRF-Token": csrf_token(key)}, json={
            "name": "s", "provider": "scripted", "model": "scripted"})
        assert r.status_code == 401


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
                 .status_code for _ in range(PAIR_FAILURES + 1)]
        assert codes[:PAIR_FAILURES] == [401] * PAIR_FAILURES and codes[-1] == 429


def _from(app: Any, address: str) -> httpx.AsyncClient:
    """A client whose connection comes from `address` (the ASGI scope's client)."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=(address, 5000)),
                             base_url="http://ator")


async def _attempts(client: httpx.AsyncClient, key: str, count: int) -> list[int]:
    return [(await client.post("/v1/sessions", json={"key": key})).status_code
            for _ in range(count)]


async def test_bad_logins_lock_out_only_that_address_with_that_key(app: Any) -> None:
    """Issue 17 S9: failures are counted per (address, key prefix). Past the limit that pair
    gets 429 with Retry-After; a valid key from the same address, another wrong key from it,
    and the same wrong key from another address are not refused."""
    application, _, key = app
    guess = f"ator_{key[5:13]}_wrongsecretwrongsecret"  # aims at the valid key's account
    async with _from(application, "198.51.100.7") as attacker, \
            _from(application, "198.51.100.7") as colleague, \
            _from(application, "203.0.113.9") as elsewhere:
        assert await _attempts(attacker, guess, PAIR_FAILURES) == [401] * PAIR_FAILURES
        locked = await attacker.post("/v1/sessions", json={"key": guess})
        assert locked.status_code == 429 and locked.json()["code"] == "rate_limited"
        assert 50 <= int(locked.headers["retry-after"]) <= 60
        # The same address, another account: a typo'd other key is a plain 401.
        assert await _attempts(colleague, "ator_ffffffff_typo", 1) == [401]
        # The same guess from elsewhere is judged on its own.
        assert await _attempts(elsewhere, guess, 1) == [401]
        # The lock is the pair's: the account's owner behind the same address waits too
        # (the price of refusing a guess without checking it), but not from anywhere else.
        assert await _attempts(colleague, key, 1) == [429]
        assert await _attempts(elsewhere, key, 1) == [201]


async def test_failures_of_others_never_refuse_a_valid_key(app: Any) -> None:
    """The old limit counted every attempt per address: 30 bad logins from a shared NAT or
    the server's own host refused every valid login from it for a minute."""
    application, runtime, key = app
    other = await member_key(runtime, _scope(await runtime.create_org("nat")), "viewer")
    async with _from(application, "192.0.2.50") as shared:
        for n in range(40):  # many wrong keys, none the valid one's account
            await shared.post("/v1/sessions", json={"key": f"ator_{n:08x}_nope"})
        await _attempts(shared, "not-even-a-key", PAIR_FAILURES + 5)
        assert await _attempts(shared, key, 1) == [201]
        assert await _attempts(shared, other, 1) == [201]


async def test_a_guess_spread_over_addresses_locks_each_at_its_first_failure(app: Any) -> None:
    """Past ACCOUNT_FAILURES failures a minute on one account (from any addresses), an
    address that fails on it is locked for it at once; one that presents the right key is
    never refused."""
    application, _, key = app
    guess = f"ator_{key[5:13]}_spreadguessspreadguess"
    for n in range(ACCOUNT_FAILURES + 1):
        async with _from(application, f"10.9.{n // 250}.{n % 250 + 1}") as bot:
            assert await _attempts(bot, guess, 1) == [401]
    async with _from(application, "10.9.99.1") as late_bot, \
            _from(application, "10.9.99.2") as owner:
        assert await _attempts(late_bot, guess, 2) == [401, 429]
        assert await _attempts(owner, key, 1) == [201]


async def test_each_lock_of_a_pair_within_the_hour_lasts_twice_as_long() -> None:
    now = [1_000.0]
    coord = LocalCoordinator(clock=lambda: now[0])
    throttle = LoginThrottle(coord)
    waits = []
    for _ in range(3):
        for _ in range(PAIR_FAILURES):
            await throttle.failed("192.0.2.1", "ator_abcdef12_x")
        with pytest.raises(RateLimited) as locked:
            await throttle.check("192.0.2.1", "ator_abcdef12_x")
        waits.append(round(locked.value.retry_after / 60))
        now[0] += locked.value.retry_after + 61  # the lock and the failure window pass
        await throttle.check("192.0.2.1", "ator_abcdef12_x")  # free again
    assert waits == [1, 2, 4]
    await coord.close()


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
            # An API key in the cookie (with the CSRF token derived from it) is no session.
            cookie = f"ator_session={key}"
            refused = await connect({"csrf": csrf_token(key)})
            assert refused and refused[0]["data"]["code"] == "unauthenticated", refused
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


@pytest.mark.parametrize("path", [
    "/ui/index.html%00.js", "/ui/%00", "/ui/assets/%00index-abc.js", "/ui/a%01b.js",
    "/ui/%ff%fe.js", "/ui/%ed%a0%80.js", "/ui/" + "a" * 300 + ".js",
    "/ui/" + "a/" * 600 + "x.js",
])
async def test_a_console_path_with_a_nul_or_bad_bytes_is_a_404_problem(
    make_ator: Any, tmp_path: Path, path: str,
) -> None:
    """Issue 17 S7: NUL made the path check raise (500); no file has such a name."""
    (tmp_path / "index.html").write_text("<!doctype html><div id=app></div>")
    async with make_ator() as runtime:
        application = create_app(runtime.settings.model_copy(update={"web_dir": tmp_path}),
                                 runtime=runtime)
        application.state.ator = runtime
        async with _client(application) as client:
            r = await client.get(path)
    assert r.status_code == 404, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["code"] == "not_found"


def test_trusted_proxies_are_addresses_or_networks() -> None:
    from pydantic import ValidationError

    from ator.settings import Settings

    assert Settings().trusted_proxies == ()
    given = Settings(trusted_proxies=" 10.0.0.0/8, 127.0.0.1,::1 ")
    assert given.trusted_proxies == ("10.0.0.0/8", "127.0.0.1", "::1")
    with pytest.raises(ValidationError, match="not an IP address"):
        Settings(trusted_proxies="proxy.internal")


async def test_a_login_lock_holds_on_every_replica(pair: Any) -> None:
    """Counters and locks live on the coordinator: failures seen by one replica lock the
    pair on the other (Redis), as in one process (local)."""
    first, second = pair
    guess = f"ator_{UUID(int=0).hex[:8]}_x"
    for _ in range(PAIR_FAILURES):
        await LoginThrottle(first).failed("192.0.2.77", guess)
    with pytest.raises(RateLimited) as locked:
        await LoginThrottle(second).check("192.0.2.77", guess)
    assert 50 <= locked.value.retry_after <= 60
    await LoginThrottle(second).check("192.0.2.78", guess)  # another address: free
