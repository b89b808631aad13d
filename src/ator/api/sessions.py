"""Console login: an API key exchanged for a session cookie (layer: api; imports engine,
security.sessions, sso (the service)).

`POST /v1/sessions {"key"}` answers 201 with who the key is and the session's CSRF token,
and sets the session in a cookie: HttpOnly (no script reads it), SameSite=Strict, Path=/,
expiring with the session; over https it is `__Host-ator_session` and Secure, over plain http
(localhost) `ator_session` (security.sessions). Nothing secret goes to
the page but the CSRF token, which the console keeps in memory and re-reads from
`GET /v1/sessions/current` after a reload; `sso` there says whether single sign-on made the
session (the console then refreshes it, `POST /v1/sessions/refresh`, api.sso).
`DELETE /v1/sessions/current` logs out (the row is revoked, the cookie cleared). Failed
logins are throttled per (client address, key prefix), never locking out a valid key used
elsewhere or another key (engine.logins).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ator.api.auth import Unauthenticated, credential, get_ator, require
from ator.engine.access import Access
from ator.engine.logins import LoginThrottle
from ator.engine.runtime import Ator
from ator.security.sessions import csrf_token, is_session_token, session_cookie_name
from ator.sso import Sso
from ator.store.records import Principal

__all__ = ["router"]

router = APIRouter(prefix="/v1/sessions")


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=200, description="An API key (ator_…)")


def _who(p: Principal) -> dict[str, Any]:
    return {"org_id": str(p.org_id), "user_id": str(p.user_id), "role": p.role,
            "key_id": str(p.key_id), "operator": p.operator}


@router.post("", status_code=201)
async def login(body: LoginIn, request: Request, response: Response,
                ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    # The peer, or the client a trusted proxy names (ATOR_TRUSTED_PROXIES, api.app).
    client = request.client.host if request.client else "unknown"
    key = body.key.strip()
    throttle = ator.service(LoginThrottle)
    await throttle.check(client, key)
    opened = await ator.service(Access).open_session(key)
    if opened is None:
        await throttle.failed(client, key)
        raise Unauthenticated("that API key is not valid or was revoked: check it, or ask "
                              "an admin of your org for a new one")
    token, principal, expires = opened
    https = request.url.scheme == "https"
    response.set_cookie(session_cookie_name(https), token,
                        max_age=int(ator.settings.session_ttl), path="/", httponly=True,
                        samesite="strict", secure=https)
    return {**_who(principal), "csrf_token": csrf_token(token),
            "expires_at": expires.isoformat()}


@router.get("/current")
async def current(request: Request, p: Principal = Depends(require("viewer")),
                  ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    """Who is logged in; with the CSRF token when the session cookie authenticated this,
    and whether single sign-on made the session."""
    token = credential(request)
    session = bool(token and is_session_token(token))
    return {**_who(p), "csrf_token": csrf_token(token) if token and session else None,
            "sso": session and await ator.service(Sso).made(p)}


@router.delete("/current", status_code=204, response_class=Response)
async def logout(request: Request, p: Principal = Depends(require("viewer")),
                 ator: Ator = Depends(get_ator)) -> Response:
    token = credential(request)
    if token and is_session_token(token):
        await ator.service(Access).close_session(token)
    response = Response(status_code=204)
    https = request.url.scheme == "https"
    response.delete_cookie(session_cookie_name(https), path="/", httponly=True,
                           samesite="strict", secure=https)
    return response
