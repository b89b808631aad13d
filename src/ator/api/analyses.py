"""Analysis routes (layer: api; imports fastapi, engine.runtime, analyses (a service), api.*).

Under `/v1/analyses`, org-scoped: kinds (the built-in ones and the org's own: members
register and delete, viewers read), runs queued (202 with the job id), records, the
registry's figures for the last 30 days (`/v1/analyses/stats`: calls, cost, cache hits and
the fallback rate, flagged above 20%), schedules and eval runs. Another org's analysis or
kind is the plain 404 `not_found`.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Response

from ator.analyses import Analyses, Analysis, AnalysisKind, Evals
from ator.api.auth import get_ator, require
from ator.api.schemas import AnalysisKindIn, AnalysisRunIn, AnalysisScheduleIn
from ator.engine.runtime import Ator
from ator.errors import NotFound
from ator.store.records import Principal

router = APIRouter()


def analysis_view(a: Analysis) -> dict[str, Any]:
    return {"id": str(a.id), "kind": a.kind, "kind_version": a.kind_version,
            "target": a.target, "input_hash": a.input_hash, "cacheable": a.cacheable,
            "model": a.model, "output": a.output, "verdict": a.verdict,
            "problems": a.problems, "cost_usd": str(a.cost_usd),
            "spent_usd": str(a.spent_usd), "origin": a.origin, "request_id": a.request_id,
            "created_at": a.created_at.isoformat()}


def _kind_view(k: AnalysisKind, *, builtin: bool) -> dict[str, Any]:
    return {"name": k.name, "version": k.version, "builtin": builtin,
            "provider": k.provider, "model": k.model, "apply": list(k.apply),
            "at_limit": k.at_limit, "then": list(k.then), "triggers": list(k.triggers),
            "eval_cases": len(k.evals), "output_schema": k.schema}


@router.get("/v1/analyses/kinds")
async def list_kinds(p: Principal = Depends(require("viewer")),
                     ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    service = ator.service(Analyses)
    builtin = [_kind_view(k, builtin=True) for k in service.code_kinds]
    own = [{"name": r.name, "version": r.version, "builtin": False, "spec": r.spec,
            "updated_at": r.updated_at.isoformat()} for r in await service.org_kinds(p.scope)]
    return {"data": builtin + own}


@router.put("/v1/analyses/kinds/{kind_name}")
async def put_kind(kind_name: str, body: AnalysisKindIn, p: Principal = Depends(require("member")),
                   ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    row = await ator.service(Analyses).register(p.scope, kind_name, body.spec)
    return {"name": row.name, "version": row.version, "spec": row.spec,
            "updated_at": row.updated_at.isoformat()}


@router.get("/v1/analyses/kinds/{kind_name}")
async def get_kind(kind_name: str, p: Principal = Depends(require("viewer")),
                   ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    service = ator.service(Analyses)
    kind = await service.kind(p.scope, kind_name)
    return _kind_view(kind, builtin=not kind.org_defined)


@router.delete("/v1/analyses/kinds/{kind_name}", status_code=204)
async def delete_kind(kind_name: str, p: Principal = Depends(require("member")),
                      ator: Ator = Depends(get_ator)) -> Response:
    await ator.service(Analyses).delete_kind(p.scope, kind_name)
    return Response(status_code=204)


@router.post("/v1/analyses/kinds/{kind_name}/evals", status_code=201)
async def run_evals(kind_name: str, p: Principal = Depends(require("member")),
                    ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    kind = await ator.service(Analyses).kind(p.scope, kind_name)
    report = await ator.service(Evals).run(p.scope.org_id, kind)
    return report.as_dict()


@router.get("/v1/analyses/kinds/{kind_name}/evals")
async def eval_history(kind_name: str, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    await ator.service(Analyses).kind(p.scope, kind_name)
    runs = await ator.service(Evals).history(p.scope.org_id, kind_name)
    return {"data": [{"id": str(r["id"]), "kind_version": r["kind_version"],
                      "setup": r["setup"], "cases": r["cases"], "passed": r["passed"],
                      "results": r["results"], "created_at": r["created_at"].isoformat()}
                     for r in runs]}


@router.post("/v1/analyses/runs", status_code=202)
async def trigger(body: AnalysisRunIn, p: Principal = Depends(require("member")),
                  ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    job = await ator.service(Analyses).trigger(p.scope, body.kind, body.target,
                                               options=body.options, then=body.then,
                                               force=body.force)
    return {"job_id": job, "kind": body.kind, "target": body.target}


@router.post("/v1/analyses/schedules", status_code=201)
async def schedule(body: AnalysisScheduleIn, p: Principal = Depends(require("member")),
                   ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    row = await ator.service(Analyses).schedule(p.scope, body.kind, target=body.target,
                                                cron=body.cron, zone=body.zone,
                                                options=body.options)
    return {"id": str(row.id), "name": row.name, "cron": row.cron, "zone": row.zone,
            "next_tick": row.next_tick.isoformat()}


@router.get("/v1/analyses/stats")
async def stats(p: Principal = Depends(require("viewer")),
                ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return {"days": 30, "data": await ator.service(Analyses).stats(p.scope)}


@router.get("/v1/analyses")
async def list_analyses(kind: str | None = Query(default=None, max_length=63),
                        target: str | None = Query(default=None, max_length=200),
                        limit: int = Query(default=50, ge=1, le=200),
                        p: Principal = Depends(require("viewer")),
                        ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    found = await ator.service(Analyses).records(p.scope, kind=kind, target=target,
                                                 limit=limit)
    return {"data": [analysis_view(a) for a in found]}


@router.get("/v1/analyses/{analysis_id}")
async def get_analysis(analysis_id: UUID, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    try:
        return analysis_view(await ator.service(Analyses).get(p.scope, analysis_id))
    except NotFound:
        raise NotFound("analysis not found", code="not_found") from None
