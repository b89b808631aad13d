"""The audit of calls made outside a turn, over HTTP (layer: api; imports engine.tool_calls).

`GET /v1/gateway/calls?limit=&cursor=` (admin): the org's tool calls made through the MCP
gateway (and any other caller outside a turn), newest first, a page at a time: pass
`next_cursor` back as `cursor` (null on the last page). Each row says who called (the key),
which tool, the sha256 of the arguments' canonical JSON (the arguments are not kept), how
long it took, how long the result was and how it ended. Another org's rows are never listed;
a query that is not valid (`limit` outside 1..200, a cursor this list did not make) is a 422
problem+json (`validation_failed`, `invalid_cursor`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query

from ator.api.auth import get_ator, require
from ator.engine.runtime import Ator
from ator.engine.tool_calls import ToolCalls
from ator.store.records import Principal

router = APIRouter(prefix="/v1/gateway")


@router.get("/calls")
async def list_calls(
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = Query(default=None, min_length=1, max_length=200),
    p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    page = await ator.service(ToolCalls).audit(p.scope, limit=limit, cursor=cursor)
    return {"data": [
        {"id": str(r.id), "principal_kind": r.principal_kind,
         "principal_id": str(r.principal_id), "tool": r.tool, "args_sha256": r.args_sha256,
         "duration_ms": r.duration_ms, "result_chars": r.result_chars, "outcome": r.outcome,
         "error_code": r.error_code, "created_at": r.created_at.isoformat()}
        for r in page.rows], "next_cursor": page.next_cursor}
