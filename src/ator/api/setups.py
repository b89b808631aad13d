"""Setups: CRUD and archive (layer: api). Reading needs viewer; writing needs admin.

Creating and patching both go through the runtime (`Ator.create_setup` / `update_setup`),
which validates the setup as it would be stored: a bad value is a 422 naming the field."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query

from ator.api import views
from ator.api.auth import get_ator, require
from ator.api.schemas import SetupIn, SetupPatch
from ator.engine.runtime import Ator
from ator.store.records import Principal

router = APIRouter(prefix="/v1/setups")


@router.post("", status_code=201)
async def create_setup(
    body: SetupIn, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    setup = await ator.create_setup(
        p.scope, name=body.name, provider=body.provider, model=body.model,
        persona=body.persona, config=body.config, tool_policy=body.tool_policy,
    )
    return views.setup(setup)


@router.get("")
async def list_setups(
    include_archived: bool = Query(default=False),
    p: Principal = Depends(require("viewer")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    found = await ator.setups(p.scope, include_archived=include_archived)
    return {"data": [views.setup(s) for s in found]}


@router.get("/{setup_id}")
async def get_setup(
    setup_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return views.setup(await ator.setup(p.scope, setup_id))


@router.patch("/{setup_id}")
async def patch_setup(
    setup_id: UUID, body: SetupPatch, p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    return views.setup(await ator.update_setup(p.scope, setup_id, **changes))


@router.delete("/{setup_id}")
async def archive_setup(
    setup_id: UUID, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return views.setup(await ator.archive_setup(p.scope, setup_id))
