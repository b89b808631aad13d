"""Orgs, users, API keys and secrets (layer: api).

Orgs are created by the installation's operator org; an org admin manages its own keys,
secrets and budget. A key is shown once, at creation.

Budgets have two levels: the operator sets (or clears) an org's `budget_ceiling_usd`; the
org's admin sets an optional lower `monthly_budget_usd` (above the ceiling: 422). The org
can neither raise nor clear the ceiling (403): clearing its own budget leaves it in force.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Response

from ator.api import views
from ator.api.auth import get_ator, require
from ator.api.schemas import KeyIn, OrgIn, OrgPatch, SecretIn
from ator.engine.runtime import Ator
from ator.errors import Conflict, Forbidden, NotFound
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store import secrets as secret_store
from ator.store.keys import Principal
from ator.store.scope import Scope

router = APIRouter(prefix="/v1")

_SECRET_NAME = r"^[A-Za-z0-9_.\-]{1,100}$"


def _org_scope(principal: Principal, org_id: UUID) -> Scope:
    """The operator may act on any org; anyone else only on their own (404 otherwise)."""
    if org_id != principal.org_id and not principal.operator:
        raise NotFound("org not found")
    return Scope(org_id, principal.user_id, principal.role)


@router.post("/orgs", status_code=201)
async def create_org(
    body: OrgIn, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    if not p.operator:
        raise NotFound("not found")  # org management does not exist for tenants
    return views.org(await org_store.create_org(
        ator.db, body.name, monthly_budget_usd=body.monthly_budget_usd,
        budget_ceiling_usd=body.budget_ceiling_usd))


@router.get("/orgs")
async def list_orgs(
    p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    if p.operator and p.role == "admin":
        found = await org_store.list_orgs(ator.db)
    else:
        found = [await org_store.get_org(ator.db, p.scope)]
    return {"data": [views.org(o) for o in found]}


@router.get("/orgs/{org_id}")
async def get_org(
    org_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return views.org(await org_store.get_org(ator.db, _org_scope(p, org_id)))


@router.patch("/orgs/{org_id}")
async def patch_org(
    org_id: UUID, body: OrgPatch, p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    scope = _org_scope(p, org_id)
    changes = body.model_fields_set
    if "budget_ceiling_usd" in changes:
        if not p.operator:
            raise Forbidden("only the operator can set or clear an org's budget ceiling",
                            code="budget_ceiling_is_operators")
        await org_store.set_org_ceiling(ator.db, scope, body.budget_ceiling_usd)
    if "monthly_budget_usd" in changes:
        await org_store.set_org_budget(ator.db, scope, body.monthly_budget_usd)
    return views.org(await org_store.get_org(ator.db, scope))


async def _issue_key(ator: Ator, scope: Scope, body: KeyIn) -> dict[str, Any]:
    try:
        user_id = await org_store.create_user(ator.db, scope, body.email, body.role)
    except Conflict:
        user_id = await org_store.find_user(ator.db, scope, body.email)
    record, secret = await key_store.create_key(
        ator.db, scope, user_id=user_id, name=body.name, role=body.role
    )
    return {**views.key(record), "key": secret}


@router.post("/api-keys", status_code=201)
async def create_key(
    body: KeyIn, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    """A key for a user of the caller's org (the user is created if new). Shown once."""
    return await _issue_key(ator, p.scope, body)


@router.post("/orgs/{org_id}/api-keys", status_code=201)
async def create_org_key(
    org_id: UUID, body: KeyIn, p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    """The operator's way to hand a new org its first admin key. Shown once."""
    scope = _org_scope(p, org_id)
    await org_store.get_org(ator.db, scope)
    return await _issue_key(ator, scope, body)


@router.get("/api-keys")
async def list_keys(
    p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return {"data": [views.key(k) for k in await key_store.list_keys(ator.db, p.scope)]}


@router.delete("/api-keys/{key_id}")
async def revoke_key(
    key_id: UUID, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return views.key(await key_store.revoke_key(ator.db, p.scope, key_id))


@router.put("/secrets/{name}", status_code=204, response_class=Response)
async def put_secret(
    body: SecretIn,
    name: str = Path(pattern=_SECRET_NAME),
    p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> Response:
    await ator.put_secret(p.scope, name, body.value)
    return Response(status_code=204)


@router.get("/secrets")
async def list_secrets(
    p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    names = await secret_store.list_secret_names(ator.db, p.scope)
    return {"data": [{"name": n} for n in names]}


@router.delete("/secrets/{name}", status_code=204, response_class=Response)
async def delete_secret(
    name: str = Path(pattern=_SECRET_NAME), p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> Response:
    if not await secret_store.delete_secret(ator.db, p.scope, name):
        raise NotFound("secret not found")
    return Response(status_code=204)
