"""Who is calling, and may they (layer: api; imports engine, security.sessions).

Every /v1 route depends on `require(role)`: the one place roles are enforced. A key is read
from `Authorization: Bearer <key>` (or `X-API-Key`); with neither, the console's session
cookie is used instead (`__Host-ator_session` over https, `ator_session` over http; a session
token only, never an API key), and a write (any method but GET/HEAD/OPTIONS) authenticated by the
cookie must carry the session's CSRF token in `X-CSRF-Token` (403 `csrf_failed`): the cookie
is SameSite=Strict as well, so a page on another site gets neither. The credential's
principal is looked up by hash
(`Ator.access`: cached briefly, no write per request), the
per-(org, user) rate limit counted on the coordinator (so it is global across replicas), and
the ids put into contextvars for logging. Another org's resources are then simply not found:
repositories filter by the principal's org.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

from fastapi import Depends, Request

from ator.context import org_id_var, request_id_var
from ator.engine.access import Access
from ator.engine.runtime import Ator
from ator.errors import AtorError, Forbidden, RateLimited
from ator.security.roles import check_role, has_role
from ator.security.sessions import CSRF_HEADER, csrf_valid, session_from_cookies
from ator.store.records import Principal

__all__ = ["authenticate", "credential", "get_ator", "require"]

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_WINDOW = 60.0


class Unauthenticated(AtorError):
    kind = "auth"
    code = "unauthenticated"
    status = 401


async def get_ator(request: Request) -> Ator:
    """The runtime (async: FastAPI would run a plain `def` dependency on its thread pool,
    a thread hop per request for an attribute read)."""
    ator: Ator = request.app.state.ator
    return ator


class CsrfFailed(Forbidden):
    code = "csrf_failed"


def _key_from(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


def credential(request: Request) -> str | None:
    """The request's API key, else its session cookie (CSRF-checked for writes)."""
    key = _key_from(request)
    if key:
        return key
    token = session_from_cookies(request.cookies, https=request.url.scheme == "https")
    if not token:
        return None
    if request.method not in _SAFE_METHODS and not csrf_valid(
            token, request.headers.get(CSRF_HEADER)):
        raise CsrfFailed("a write with the session cookie needs its X-CSRF-Token header; "
                         "reload the console")
    return token


async def _principal(request: Request, ator: Ator = Depends(get_ator)) -> Principal:
    request_id_var.set(request.headers.get("x-request-id") or uuid.uuid4().hex[:16])
    key = credential(request)
    if not key:
        raise Unauthenticated("an API key is required (Authorization: Bearer <key>)")
    principal = await ator.service(Access).authenticate(key)
    if principal is None:
        raise Unauthenticated("the API key or session is not valid, expired or was revoked")
    org_id_var.set(str(principal.org_id))
    limit = ator.settings.rate_limit_per_minute
    if limit > 0:
        count = await ator.count_hit(f"rl:{principal.org_id}:{principal.user_id}", _WINDOW)
        if count > limit:
            raise RateLimited(f"more than {limit} requests this minute",
                              retry_after=_WINDOW - (time.time() % _WINDOW))
    return principal


def require(role: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency admitting principals with at least `role` (viewer < member < admin)."""
    has_role(role, role)  # an unknown role fails here, at import, not on a request

    async def dependency(principal: Principal = Depends(_principal)) -> Principal:
        check_role(principal.role, role)
        return principal

    return dependency


async def authenticate(request: Request, role: str) -> Principal:
    """`require(role)` outside FastAPI's dependency injection: what the routers of the
    features' extensions (agent.routes) reach through `app.state.authenticate`."""
    principal = await _principal(request, await get_ator(request))
    check_role(principal.role, role)
    return principal
