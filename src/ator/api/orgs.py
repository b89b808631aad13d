"""Orgs and their budgets (layer: api; imports fastapi, engine.runtime, api.*).

Orgs are created by the installation's operator org; an org admin manages its own budget
(keys: api.keys, secrets: api.secrets, subagent tree caps: api.tree_caps).

Budgets have two levels: the operator sets (or clears) an org's `budget_ceiling_usd`; the
org's admin sets an optional lower `monthly_budget_usd` (above the ceiling: 422). The org
can neither raise nor clear the ceiling (403): clearing its own budget leaves it in force.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends

from ator.api import views
from ator.api.auth import get_ator, require
from ator.api.schemas import OrgIn, OrgPatch
from ator.engine.runtime import Ator
from ator.engine.tenancy import Tenancy
from ator.errors import NotFound
from ator.store.records import Principal

router = APIRouter(prefix="/v1")


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
