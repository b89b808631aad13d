"""Orgs, users, API keys and secrets (layer: api).

Orgs are created by the installation's operator org; an org admin manages its own keys,
secrets and budget. A key is shown once, at creation.

Budgets have two levels: the operator sets (or clears) an org's `budget_ceiling_usd`; the
org's admin sets an optional lower `monthly_budget_usd` (above the ceiling: 422). The org
can neither raise nor clear the ceiling (403): clearing its own budget leaves it in force.
`PUT …/tree-caps` sets the org's own subagent tree caps, which lower its setups' (422 above
the operator's ceiling).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path, Response

from ator.api import views
from ator.api.auth import get_ator, require
from ator.api.schemas import KeyIn, OrgIn, OrgPatch, SecretIn, TreeCapsIn
from ator.engine.access import Access
from ator.engine.runtime import Ator
from ator.engine.tenancy import Tenancy
from ator.errors import NotFound
from ator.store.records import Principal
from ator.store.scope import Scope

router = APIRouter(prefix="/v1")

_SECRET_NAME = r"^[A-Za-z0-9_.\-]{1,100}$"


@router.post("/orgs", status_code=201)
async def create_org(
    body: OrgIn, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    if not p.operator:
        raise NotFound("not found")  # org management does not exist for tenants
    return views.org(await ator.service(Tenancy).create_org(
        body.name, monthly_budget_usd=body.monthly_budget_usd,
        budget_ceiling_usd=body.budget_ceiling_usd))


@router.get("/orgs")
async def list_orgs(
    p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return {"data": [views.org(o) for o in await ator.service(Tenancy).orgs(p)]}


@router.get("/orgs/{org_id}")
async def get_org(
    org_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return views.org(await ator.service(Tenancy).org(ator.service(Tenancy).scope_for(p, org_id)))


@router.patch("/orgs/{org_id}")
async def patch_org(
    org_id: UUID, body: OrgPatch, p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    changes = {name: getattr(body, name) for name in body.model_fields_set
               if name in ("monthly_budget_usd", "budget_ceiling_usd")}
    tenancy = ator.service(Tenancy)
    return views.org(await tenancy.update_budgets(p, tenancy.scope_for(p, org_id), **changes))


@router.put("/orgs/{org_id}/tree-caps")
async def put_tree_caps(
    org_id: UUID, body: TreeCapsIn, p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    caps = body.model_dump(exclude_none=True)
    scope = ator.service(Tenancy).scope_for(p, org_id)
    await ator.service(Tenancy).org(scope)  # 404 for an org that does not exist
    await ator.set_org_caps(scope, caps)
    return {"org_id": str(org_id), "tree_caps": caps}


async def _issue_key(ator: Ator, scope: Scope, body: KeyIn) -> dict[str, Any]:
    record, secret = await ator.service(Access).issue_key(scope, email=body.email, role=body.role,
                                                 name=body.name)
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
    scope = ator.service(Tenancy).scope_for(p, org_id)
    await ator.service(Tenancy).org(scope)
    return await _issue_key(ator, scope, body)


@router.get("/api-keys")
async def list_keys(
    p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return {"data": [views.key(k) for k in await ator.service(Access).list_keys(p.scope)]}


@router.delete("/api-keys/{key_id}")
async def revoke_key(
    key_id: UUID, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return views.key(await ator.service(Access).revoke_key(p.scope, key_id))


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
    return {"data": [{"name": n} for n in await ator.service(Tenancy).secret_names(p.scope)]}


@router.delete("/secrets/{name}", status_code=204, response_class=Response)
async def delete_secret(
    name: str = Path(pattern=_SECRET_NAME), p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> Response:
    await ator.service(Tenancy).delete_secret(p.scope, name)
    return Response(status_code=204)
