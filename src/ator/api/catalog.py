"""The model catalog, read-only (layer: api; imports engine.catalog).

`GET /v1/catalog/models` (any member of an org, viewer up): each provider a setup may name
with `server_key` (the operator set a process-wide key: leaving `base_url` out uses the
server's endpoint with it) and its known models, each with `context_window` (the catalog's,
tokens; null when it has none), `planned_window` (what a turn plans compaction for) and
`price` (USD per million tokens: input, output, cache read, cache write; null when
unpriced). The console's setup form offers these.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from ator.api.auth import get_ator, require
from ator.cost.price import Price
from ator.engine.catalog import offered_providers
from ator.engine.runtime import Ator
from ator.store.records import Principal

router = APIRouter(prefix="/v1/catalog")


def _price(p: Price | None) -> dict[str, str] | None:
    if p is None:
        return None
    return {"input_mtok": str(p.input), "output_mtok": str(p.output),
            "cache_read_mtok": str(p.cache_read), "cache_write_mtok": str(p.cache_write)}


@router.get("/models")
async def list_models(
    _p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return {"data": [
        {"id": pr.id, "label": pr.label, "server_key": pr.server_key,
         "models": [{"id": m.id, "name": m.name, "context_window": m.context_window,
                     "planned_window": m.planned_window, "price": _price(m.price)}
                    for m in pr.models]}
        for pr in offered_providers(ator.settings, ator.prices)]}
