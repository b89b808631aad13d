"""Approval routes (layer: api; imports fastapi, engine.runtime, engine.approvals, api.*).

`/v1/approvals`: the org's pending actions (held tool calls, `kind=tool`, and workflow
`human` gates, `kind=gate`: its subject has the run, step, prompt, input schema and
deciders; approving takes the decision's value as `arguments`, checked against that
schema, and a decider the gate does not name gets 403 `not_a_decider`), oldest first and
cursor-paged;
one action with its decision's audit (who, when, arguments before and after, reason,
result); `POST /v1/approvals/{id}/decision` (members: approve, approve with edited
arguments, deny with a reason; 409 `approval_decided` when it was decided already, 422
`invalid_arguments` for edited arguments the tool's schema refuses). Viewers read; another
org's action is the plain 404 `not_found`. `/v1/approvals/settings`: whether every MCP tool
not marked read-only needs approval in the org (admins set it).
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Query

from ator.api.auth import get_ator, require
from ator.api.schemas import ApprovalDecisionIn, ApprovalSettingsIn
from ator.engine.approvals import Approvals, Decision, action_view
from ator.engine.runtime import Ator
from ator.store.records import Principal

router = APIRouter()


@router.get("/v1/approvals")
async def list_approvals(
    limit: int = Query(default=50, ge=1, le=200),
    cursor: str | None = Query(default=None, min_length=1, max_length=200),
    kind: Literal["tool", "gate"] | None = Query(default=None),
    p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    page = await ator.service(Approvals).pending(p.scope, limit=limit, cursor=cursor,
                                                 kind=kind)
    return {"data": [action_view(a) for a in page.actions], "next_cursor": page.next_cursor}


@router.get("/v1/approvals/settings")
async def get_settings(p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return await ator.service(Approvals).settings(p.scope)


@router.put("/v1/approvals/settings")
async def put_settings(body: ApprovalSettingsIn, p: Principal = Depends(require("admin")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return await ator.service(Approvals).set_settings(
        p.scope, approve_mcp_writes=body.approve_mcp_writes)


@router.get("/v1/approvals/{action_id}")
async def get_approval(action_id: UUID, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return action_view(await ator.service(Approvals).get(p.scope, action_id))


@router.post("/v1/approvals/{action_id}/decision")
async def decide(action_id: UUID, body: ApprovalDecisionIn,
                 p: Principal = Depends(require("member")),
                 ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    decided = await ator.service(Approvals).decide(
        p.scope, action_id, p.user_id,
        Decision(body.decision == "approve", body.arguments, body.reason))
    return action_view(decided)
