"""The JSON response class of every route (layer: api; imports starlette, ator.jsonenc).

FastAPI's own `JSONResponse` encodes with the standard library; ator encodes everything else
(events, frames, notices, SSE, socket packets) with orjson through `ator.jsonenc`. One encoder
means one set of rules for what a value becomes: FastAPI first turns a route's result into
plain JSON types (`jsonable_encoder` or the response model: datetimes as ISO 8601, UUIDs and
Decimals as it always has), then this class only writes those values out — the same JSON,
compact and UTF-8, as the standard library wrote. One difference on purpose: a NaN or an
infinity, which FastAPI's encoder refuses with a 500, becomes `null` as in every other
payload ator sends.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse

from ator import jsonenc

__all__ = ["JsonResponse"]


class JsonResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return jsonenc.encode(content)
