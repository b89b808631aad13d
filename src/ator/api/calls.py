"""The inspector's routes: what each model call was sent (layer: api; imports fastapi,
engine.runtime).

`GET /v1/turns/{id}/calls` and `GET /v1/calls/{id}`: the layer hashes and versions, tools,
breakpoints and size of each model call, its usage and cost, latency and time to first
token, and a diff against the thread's previous call naming what broke the prompt cache.
Only the thread's creator and admins may look; anyone else gets a 404.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Path

from ator.api.auth import get_ator, require
from ator.engine.inspector import Inspector
from ator.engine.runtime import Ator
from ator.store.records import Principal

router = APIRouter(prefix="/v1")


@router.get("/turns/{turn_id}/calls")
async def turn_calls(
    turn_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return {"data": await ator.service(Inspector).turn_calls(p.scope, turn_id)}


@router.get("/calls/{call_id}")
async def get_call(
    call_id: int = Path(ge=1, le=2**63 - 1), p: Principal = Depends(require("viewer")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    return await ator.service(Inspector).call(p.scope, call_id)
