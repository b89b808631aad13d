"""Schedules of workflow runs over HTTP (layer: api; imports the `RunSchedules` service).

    POST   /v1/schedules                 create (admin): cron, zone, overlap, catch_up and a
                                         target {workflow_id, input, version, budget}
    GET    /v1/schedules?cursor&limit    by name, cursor-paged (viewer)
    GET    /v1/schedules/{id}            (viewer)
    POST   /v1/schedules/{id}/pause      (member: anyone who may act may stop the spending)
    POST   /v1/schedules/{id}/resume     (admin: a resumed schedule spends again)
    DELETE /v1/schedules/{id}            (admin)

A schedule is a standing order to spend the org's money without anyone watching, so making,
resuming and deleting one is an admin's; pausing one is a member's. Problems: 422
`invalid_cron`, `invalid_zone`, `invalid_overlap`, `invalid_catch_up`, `invalid_budget`,
`input_invalid`; 409 `schedule_exists`; 404 `not_found` (also another org's, like every record) and
`not_found` for a workflow that is not the org's.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Response
from pydantic import Field

from ator.api.auth import get_ator, require
from ator.api.schemas import _Body
from ator.engine.runtime import Ator
from ator.errors import ValidationFailed
from ator.security.limits import JsonLimits, check_json
from ator.store.records import Principal
from ator.workflows import RunSchedules

router = APIRouter(prefix="/v1")

INPUT = JsonLimits(max_bytes=256 * 1024, max_depth=32, max_items=20_000)


class BudgetIn(_Body):
    max_steps: int | None = Field(default=None, ge=1, le=1_000_000)
    wall_clock_s: float | None = Field(default=None, gt=0, le=366 * 86_400)


class TargetIn(_Body):
    workflow_id: UUID
    input: Any = Field(default_factory=dict)
    version: int | None = Field(default=None, ge=1, description="default: the latest")
    budget: BudgetIn = Field(default_factory=BudgetIn)


class ScheduleIn(_Body):
    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._ -]*$")
    cron: str = Field(min_length=1, max_length=200)
    zone: str = Field(default="UTC", min_length=1, max_length=64)
    overlap: str = Field(default="skip", max_length=16)
    catch_up: float = Field(default=60.0, description="seconds: later ticks are skipped")
    target: TargetIn


def _service(ator: Ator) -> RunSchedules:
    return ator.service(RunSchedules)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _schedule(row: Any) -> dict[str, Any]:
    payload = row.payload or {}
    return {
        "id": str(row.id), "name": row.name, "cron": row.cron, "zone": row.zone,
        "overlap": row.overlap, "catch_up": row.catch_up,
        "status": "active" if row.enabled else "paused",
        "next_tick": _iso(row.next_tick) if row.enabled else None,
        "last_tick": _iso(row.last_tick),
        "target": {"workflow_id": payload.get("workflow_id"), "input": payload.get("input"),
                   "version": payload.get("version"), "budget": payload.get("budget") or {}},
    }


@router.post("/schedules", status_code=201)
async def create_schedule(body: ScheduleIn, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    check_json(body.target.input, INPUT, ("body", "target", "input"))
    budget = body.target.budget.model_dump(exclude_none=True)
    row = await _service(ator).create(
        p.scope, name=body.name, cron=body.cron, zone=body.zone, overlap=body.overlap,
        catch_up=body.catch_up, workflow_id=body.target.workflow_id, input=body.target.input,
        version=body.target.version, budget=budget)
    return _schedule(row)


@router.get("/schedules")
async def list_schedules(p: Principal = Depends(require("viewer")),
                         ator: Ator = Depends(get_ator), cursor: str | None = None,
                         limit: int = Query(default=50, ge=1, le=200)) -> dict[str, Any]:
    after = None
    if cursor:
        try:
            after = base64.urlsafe_b64decode(cursor.encode()).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise ValidationFailed("the cursor is not valid", code="invalid_cursor") from exc
    rows = await _service(ator).schedules.page(p.scope, after=after, limit=limit)
    nxt = (base64.urlsafe_b64encode(rows[-1].name.encode()).decode()
           if len(rows) == limit else None)
    return {"data": [_schedule(r) for r in rows], "next_cursor": nxt}


@router.get("/schedules/{schedule_id}")
async def get_schedule(schedule_id: UUID, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _schedule(await _service(ator).schedules.get(p.scope, schedule_id))


@router.post("/schedules/{schedule_id}/pause")
async def pause_schedule(schedule_id: UUID, p: Principal = Depends(require("member")),
                         ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _schedule(await _service(ator).schedules.pause(p.scope, schedule_id))


@router.post("/schedules/{schedule_id}/resume")
async def resume_schedule(schedule_id: UUID, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _schedule(await _service(ator).schedules.resume(p.scope, schedule_id))


@router.delete("/schedules/{schedule_id}", status_code=204)
async def delete_schedule(schedule_id: UUID, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> Response:
    await _service(ator).schedules.delete(p.scope, schedule_id)
    return Response(status_code=204)
