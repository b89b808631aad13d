"""The editable prompt layers (layer: api; imports fastapi, engine.runtime, engine.instructions).

- `GET/PUT /v1/org/policy` (read: viewer, edit: admin) and `GET /v1/org/policy/versions`;
- `GET/PUT /v1/threads/{id}/instructions` (read: viewer, edit: member) and `…/versions`;
  every edit bumps the layer's version (0: as created) and keeps the old text; a turn
  uses the versions in force when it starts.

The inspector of model calls is api.calls.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query

from ator.api.auth import get_ator, require
from ator.api.schemas import InstructionsIn, PolicyIn
from ator.engine.instructions import LayerText, LayerVersion, Prompts
from ator.engine.runtime import Ator
from ator.store.records import Principal

router = APIRouter(prefix="/v1")


def _layer(layer: LayerText) -> dict[str, Any]:
    out: dict[str, Any] = {"layer": layer.layer, "text": layer.text, "version": layer.version}
    if layer.layer == "org_policy":
        out["replace"] = layer.replace
    return out


def _version(v: LayerVersion) -> dict[str, Any]:
    return {"version": v.version, "text": v.text, "replace": v.replace,
            "set_by": str(v.set_by) if v.set_by else None, "set_at": v.set_at.isoformat()}


@router.get("/org/policy")
async def get_policy(
    p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return _layer(await ator.service(Prompts).policy(p.scope))


@router.put("/org/policy")
async def put_policy(
    body: PolicyIn, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return _layer(await ator.service(Prompts).set_policy(p.scope, body.text, replace=body.replace,
                                                if_version=body.if_version))


@router.get("/org/policy/versions")
async def policy_versions(
    limit: int = Query(default=50, ge=1, le=200),
    p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    return {"data": [_version(v) for v in await ator.service(Prompts).policy_versions(p.scope,
                                                                              limit=limit)]}


@router.get("/threads/{thread_id}/instructions")
async def get_instructions(
    thread_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return _layer(await ator.service(Prompts).instructions(p.scope, thread_id))


@router.put("/threads/{thread_id}/instructions")
async def put_instructions(
    thread_id: UUID, body: InstructionsIn, p: Principal = Depends(require("member")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    return _layer(await ator.service(Prompts).set_instructions(p.scope, thread_id, body.text,
                                                      if_version=body.if_version))


@router.get("/threads/{thread_id}/instructions/versions")
async def instruction_versions(
    thread_id: UUID, limit: int = Query(default=50, ge=1, le=200),
    p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    found = await ator.service(Prompts).instruction_versions(p.scope, thread_id, limit=limit)
    return {"data": [_version(v) for v in found]}
