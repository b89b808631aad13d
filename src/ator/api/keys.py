"""API keys of an org, and the operator's first key for a new org (layer: api; imports
fastapi, engine.runtime, api.*). A key is shown once, at creation."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends

from ator.api import views
from ator.api.auth import get_ator, require
from ator.api.schemas import KeyIn
from ator.engine.access import Access
from ator.engine.runtime import Ator
from ator.engine.tenancy import Tenancy
from ator.store.records import Principal
from ator.store.scope import Scope

router = APIRouter(prefix="/v1")


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
