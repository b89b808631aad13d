"""An org's own subagent tree caps (layer: api; imports fastapi, engine.runtime, api.*).

`PUT /v1/orgs/{org_id}/tree-caps` sets them; they lower its setups' (422 above the operator's
ceiling)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends

from ator.api.auth import get_ator, require
from ator.api.schemas import TreeCapsIn
from ator.engine.runtime import Ator
from ator.engine.tenancy import Tenancy
from ator.store.records import Principal

router = APIRouter(prefix="/v1")


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
