"""A small OpenID Connect provider for the SSO tests, on well-kept libraries: starlette for
the endpoints, joserfc for the signed ID tokens (RS256) and the JWKS, served by uvicorn on a
real port (ator reaches it over HTTP through its egress guard).

It implements what the code flow needs, strictly: discovery, `/authorize` (signs in
`provider.person` without a form, or else shows a login form for `provider.people`, which a
browser fills in; response_type=code; PKCE S256 required), `/token`
(client_secret_basic; authorization_code once per code, the redirect URI and the PKCE
verifier checked; refresh_token refused for a disabled person), `/jwks`. `issued_iss`
overrides the `iss` it puts in ID tokens (a misbehaving or impersonating provider).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import urlencode

import uvicorn
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route


@dataclass
class Person:
    sub: str
    email: str
    groups: list[str] = field(default_factory=list)
    disabled: bool = False
    password: str = ""  # what the login form asks for (`Provider.people`)


@dataclass
class Provider:
    client_id: str = "ator-console"
    client_secret: str = "s3cret"
    issuer: str = ""
    person: Person | None = None  # signed in without a form
    people: list[Person] = field(default_factory=list)  # who may sign in through the form
    issued_iss: str | None = None
    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048,
                                                                    parameters={"kid": "k1"}))
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    refresh: dict[str, Person] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/.well-known/openid-configuration", self.discovery),
            Route("/authorize", self.authorize, methods=["GET", "POST"]),
            Route("/token", self.token, methods=["POST"]),
            Route("/jwks", self.jwks),
        ])

    async def discovery(self, request: Request) -> Response:
        return JSONResponse({
            "issuer": self.issuer, "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token", "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"]})

    async def jwks(self, request: Request) -> Response:
        return JSONResponse(KeySet([self.key]).as_dict(private=False))

    async def authorize(self, request: Request) -> Response:
        q = dict(request.query_params if request.method == "GET" else await request.form())
        if q.get("client_id") != self.client_id or q.get("response_type") != "code":
            return JSONResponse({"error": "unauthorized_client"}, status_code=400)
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return JSONResponse({"error": "invalid_request",
                                 "error_description": "PKCE S256 is required"}, status_code=400)
        person = self.person
        if person is None and self.people:
            if request.method == "GET":
                return self._form(q, "")
            found = [p for p in self.people if p.email == q.get("email")
                     and p.password and secrets.compare_digest(p.password,
                                                               str(q.get("password")))]
            if not found:
                return self._form(q, "Wrong email or password.")
            person = found[0]
        redirect = str(q["redirect_uri"])
        if person is None or person.disabled:
            denied = urlencode({"error": "access_denied", "state": q.get("state", "")})
            return RedirectResponse(f"{redirect}?{denied}", status_code=302)
        code = secrets.token_urlsafe(24)
        self.codes[code] = {"redirect_uri": redirect, "challenge": q["code_challenge"],
                            "nonce": q.get("nonce"), "person": person, "used": False}
        return RedirectResponse(f"{redirect}?{urlencode({'code': code, 'state': q['state']})}",
                                status_code=302)

    def _form(self, q: dict[str, Any], error: str) -> Response:
        """The provider's login page: the authorize request rides along in hidden fields."""
        hidden = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(str(v))}">'
                         for k, v in q.items() if k not in ("email", "password"))
        alert = f'<p role="alert">{escape(error)}</p>' if error else ""
        return HTMLResponse(
            "<!doctype html><title>Test IdP: sign in</title><h1>Test IdP</h1>"
            f'<form method="post" action="/authorize">{hidden}{alert}'
            '<label>Email <input name="email" type="email" required></label>'
            '<label>Password <input name="password" type="password" required></label>'
            '<button type="submit">Sign in</button></form>',
            status_code=401 if error else 200)

    def _client_ok(self, request: Request) -> bool:
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Basic "):
            return False
        user, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
        return (user, secret) == (self.client_id, self.client_secret)

    async def token(self, request: Request) -> Response:
        form = dict(await request.form())
        self.token_requests.append({k: str(v) for k, v in form.items()})
        if not self._client_ok(request):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        grant = form.get("grant_type")
        if grant == "authorization_code":
            found = self.codes.get(str(form.get("code")))
            if found is None or found["used"] \
                    or found["redirect_uri"] != form.get("redirect_uri"):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            verifier = str(form.get("code_verifier") or "")
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
            if not verifier or digest.rstrip(b"=").decode() != found["challenge"]:
                return JSONResponse({"error": "invalid_grant",
                                     "error_description": "PKCE verification failed"},
                                    status_code=400)
            found["used"] = True
            return JSONResponse(self._tokens(found["person"], found["nonce"]))
        if grant == "refresh_token":
            person = self.refresh.get(str(form.get("refresh_token")))
            if person is None or person.disabled:
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            return JSONResponse(self._tokens(person, None))
        return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)

    def _tokens(self, person: Person, nonce: str | None) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {"iss": self.issued_iss or self.issuer, "aud": self.client_id,
                                  "sub": person.sub, "email": person.email,
                                  "email_verified": True, "groups": person.groups,
                                  "iat": now, "exp": now + 300}
        if nonce:
            claims["nonce"] = nonce
        refresh = secrets.token_urlsafe(24)
        self.refresh[refresh] = person
        return {"access_token": secrets.token_urlsafe(16), "token_type": "Bearer",
                "expires_in": 300, "refresh_token": refresh,
                "id_token": jwt.encode({"alg": "RS256", "kid": "k1"}, claims, self.key)}


@asynccontextmanager
async def running_provider() -> AsyncIterator[Provider]:
    """A provider served on 127.0.0.1 on a free port for the block."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    provider = Provider(issuer=f"http://127.0.0.1:{port}")
    server = uvicorn.Server(uvicorn.Config(provider.app(), log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while not server.started:  # uvicorn has no started event to wait on
            if task.done():
                task.result()
            assert asyncio.get_running_loop().time() < deadline, "the provider did not start"
            await asyncio.sleep(0.01)
        yield provider
    finally:
        server.should_exit = True
        await task
        sock.close()
