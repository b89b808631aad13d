"""An org's encrypted secrets: put, list by name, delete (layer: api; imports fastapi,
engine.runtime, api.*). Values are never returned."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Path, Response

from ator.api.auth import get_ator, require
from ator.api.schemas import SecretIn
from ator.engine.runtime import Ator
from ator.engine.tenancy import Tenancy
from ator.store.records import Principal

router = APIRouter(prefix="/v1")

_SECRET_NAME = r"^[A-Za-z0-9_.\-]{1,100}$"


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
