"""Retention routes (layer: retention; imports fastapi, pydantic, agent.routes, store.records,
retention.service), contributed by the retention extension (`RetentionExtension.routes()`).

`GET /v1/org/retention` (viewer): the org's policy, the operator's defaults and bounds, the
next pass and what it removes. `PUT /v1/org/retention` (admin): the org's own days per
class. `GET /v1/org/purges` (viewer): the purge audit. `GET /v1/threads/{id}/export`
(member): a thread as JSON — in the trash too, until it is purged; another org's is 404.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from ator.agent.routes import Body, require, service
from ator.retention.service import Retention, RetentionReport
from ator.store.records import Principal

__all__ = ["RetentionIn", "router"]

router = APIRouter(prefix="/v1")


class RetentionIn(Body):
    """An org's retention, in days per class (null: back to the operator's default; absent:
    unchanged). The operator's bounds are checked by the runtime (`retention_out_of_bounds`)."""

    trash_days: int | None = None
    mailbox_days: int | None = None
    events_days: int | None = Field(default=None, description="0: kept")
    runs_days: int | None = None


def report_view(r: RetentionReport) -> dict[str, Any]:
    return {"policy": r.policy.days(), "defaults": r.defaults.days(),
            "bounds": {"min_days": r.bounds[0], "max_days": r.bounds[1]},
            "next_run": r.next_run, "last_run": r.last_run, "due": r.due,
            "jobs": {"done_kept_s": r.jobs["done_s"], "dead_kept_s": r.jobs["dead_s"]}}


@router.get("/org/retention")
async def get_retention(p: Principal = Depends(require("viewer")),
                        retention: Retention = Depends(service(Retention))) -> dict[str, Any]:
    return report_view(await retention.report(p.scope))


@router.put("/org/retention")
async def set_retention(body: RetentionIn, p: Principal = Depends(require("admin")),
                        retention: Retention = Depends(service(Retention))) -> dict[str, Any]:
    await retention.set_policy(p.scope, {k: getattr(body, k) for k in body.model_fields_set})
    return report_view(await retention.report(p.scope))


@router.get("/org/purges")
async def list_purges(limit: int = Query(100, ge=1, le=500),
                      before: int | None = Query(None, ge=1),
                      p: Principal = Depends(require("viewer")),
                      retention: Retention = Depends(service(Retention))) -> dict[str, Any]:
    found = await retention.audit(p.scope, limit=limit, before=before)
    return {"data": [{"id": r.id, "what": r.what, "subject_id": r.subject_id,
                      "cutoff": r.cutoff, "rows": r.rows, "at": r.at} for r in found]}


@router.get("/threads/{thread_id}/export")
async def export_thread(thread_id: UUID, p: Principal = Depends(require("member")),
                        retention: Retention = Depends(service(Retention))) -> dict[str, Any]:
    return {"format": "ator.thread-export/v1",
            **await retention.export_thread(p.scope, thread_id)}
