"""A small OpenID Connect provider for the SSO tests, on well-kept libraries: starlette for
the endpoints, joserfc for the signed ID tokens (RS256) and the JWKS, served by uvicorn on a
real port (ator reaches it over HTTP through its egress guard).

It implements what the code flow needs, strictly: discovery, `/authorize` (signs in
`provider.person` without a form; response_type=code; PKCE S256 required), `/token`
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
from typing import Any
from urllib.parse import urlencode

import uvicorn
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route


@dataclass
class Person:
    sub: str
    email: str
    groups: list[str] = field(default_factory=list)
    disabled: bool = False


@dataclass
class Provider:
    client_id: str = "ator-console"
    client_secret: str = "s3cret"
    issuer: str = ""
    person: Person | None = None
    issued_iss: str | None = None
    key: RSAKey = field(default_factory=lambda: RSAKey.generate_key(2048,
                                                                    parameters={"kid": "k1"}))
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    refresh: dict[str, Person] = field(default_factory=dict)
    token_requests: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> Starlette:
        return Starlette(routes=[
            Route("/.well-known/openid-configuration", self.discovery),
            Route("/authorize", self.authorize),
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
        q = request.query_params
        if q.get("client_id") != self.client_id or q.get("response_type") != "code":
            return JSONResponse({"error": "unauthorized_client"}, status_code=400)
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return JSONResponse({"error": "invalid_request",
                                 "error_description": "PKCE S256 is required"}, status_code=400)
        person = self.person
        redirect = q["redirect_uri"]
        if person is None or person.disabled:
            denied = urlencode({"error": "access_denied", "state": q.get("state", "")})
            return RedirectResponse(f"{redirect}?{denied}", status_code=302)
        code = secrets.token_urlsafe(24)
        self.codes[code] = {"redirect_uri": redirect, "challenge": q["code_challenge"],
                            "nonce": q.get("nonce"), "person": person, "used": False}
        return RedirectResponse(f"{redirect}?{urlencode({'code': code, 'state': q['state']})}",
                                status_code=302)

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
