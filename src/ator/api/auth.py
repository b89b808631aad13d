"""Who is calling, and may they (layer: api; imports engine).

Every /v1 route depends on `require(role)`: the one place roles are enforced. A key is read
from `Authorization: Bearer <key>` (or `X-API-Key`), its principal looked up by hash
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
from ator.engine.runtime import Ator
from ator.errors import AtorError, Forbidden, RateLimited
from ator.store.records import Principal

__all__ = ["ROLE_RANK", "get_ator", "require"]

ROLE_RANK = {"viewer": 0, "member": 1, "admin": 2}
_WINDOW = 60.0


class Unauthenticated(AtorError):
    kind = "auth"
    code = "unauthenticated"
    status = 401


def get_ator(request: Request) -> Ator:
    ator: Ator = request.app.state.ator
    return ator


def _key_from(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip()
    return request.headers.get("x-api-key")


async def _principal(request: Request, ator: Ator = Depends(get_ator)) -> Principal:
    request_id_var.set(request.headers.get("x-request-id") or uuid.uuid4().hex[:16])
    key = _key_from(request)
    if not key:
        raise Unauthenticated("an API key is required (Authorization: Bearer <key>)")
    principal = await ator.access.authenticate(key)
    if principal is None:
        raise Unauthenticated("the API key is not valid or was revoked")
    org_id_var.set(str(principal.org_id))
    limit = ator.settings.rate_limit_per_minute
    if limit > 0:
        count = await ator.coord.hit(f"rl:{principal.org_id}:{principal.user_id}", _WINDOW)
        if count > limit:
            raise RateLimited(f"more than {limit} requests this minute",
                              retry_after=_WINDOW - (time.time() % _WINDOW))
    return principal


def require(role: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency admitting principals with at least `role` (viewer < member < admin)."""
    needed = ROLE_RANK[role]

    async def dependency(principal: Principal = Depends(_principal)) -> Principal:
        if ROLE_RANK[principal.role] < needed:
            raise Forbidden(f"this needs the {role} role; the key has {principal.role}")
        return principal

    return dependency
