"""Health, readiness, metrics and usage (layer: api).

`/metrics` is private: it answers only to `Authorization: Bearer <ATOR_METRICS_TOKEN>`, and
with no token configured it does not exist (404), so a deployment never exposes it by
forgetting a setting.
"""

from __future__ import annotations

import hmac
from datetime import UTC, date, datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response

from ator.api.auth import get_ator, require
from ator.api.problems import problem
from ator.engine.runtime import Ator
from ator.errors import ValidationFailed
from ator.store.records import Principal

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(ator: Ator = Depends(get_ator)) -> Response | dict[str, Any]:
    checks = {name: "ok" if ok else "error" for name, ok in (await ator.ready()).items()}
    load = ator.load()
    if any(v != "ok" for v in checks.values()):
        return problem(503, "not_ready", "a dependency is not ready", checks=checks, load=load)
    return {"status": "ready", "checks": checks, "load": load}


@router.get("/metrics")
async def metrics(request: Request, ator: Ator = Depends(get_ator)) -> Response:
    token = ator.settings.metrics_token
    if token is None:
        return problem(404, "not_found", "not found")
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if not hmac.compare_digest(given.encode(), token.get_secret_value().encode()):
        return problem(401, "unauthenticated", "metrics need the metrics token",
                       headers={"WWW-Authenticate": "Bearer"})
    return Response(await ator.render_metrics(),
                    media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/usage")
async def usage(
    month: str | None = Query(default=None, pattern=r"^\d{4}-(0[1-9]|1[0-2])$"),
    group_by: Literal["org", "thread", "setup"] = "org",
    p: Principal = Depends(require("viewer")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    if month is None:
        first = datetime.now(UTC).date().replace(day=1)
    else:
        try:
            first = date.fromisoformat(month + "-01")
            rows = await ator.tenancy.usage(p.scope, month=first, group=group_by)
        except ValueError as exc:  # the month, or the one after it, cannot be represented
            raise ValidationFailed("month must be YYYY-MM", code="invalid_month") from exc
        return {"month": first.isoformat()[:7], "group_by": group_by, "data": rows}
    rows = await ator.tenancy.usage(p.scope, month=first, group=group_by)
    return {"month": first.isoformat()[:7], "group_by": group_by, "data": rows}
