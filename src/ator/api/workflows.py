"""Workflows and their runs over HTTP (layer: api; imports the `Workflows` service).

    GET  /v1/workflows/schema                 the published JSON Schema of ator.workflow/v1
    POST /v1/workflows/validate               check a recipe (200, or 422 with each pointer)
    POST /v1/workflows                        create (admin)
    GET  /v1/workflows, /v1/workflows/{id}
    POST /v1/workflows/{id}/versions          publish the next immutable version (admin)
    GET  /v1/workflows/{id}/versions[/{n}]
    POST /v1/workflows/{id}/runs              start (member); `key` makes it idempotent:
                                              201 when made, 200 with the same run after
    GET  /v1/runs?workflow_id&cursor&limit    newest first, cursor-paged
    GET  /v1/runs/{id}
    POST /v1/runs/{id}/pause|resume|cancel    (member) 409 `run_state_conflict` when the
                                              run's state does not allow it
    GET  /v1/runs/{id}/steps?cursor&limit     without outputs: `preview` (≤ 2 KB), `output_size`
    GET  /v1/runs/{id}/steps/{step_id}        one step with its whole output
    GET  /v1/runs/{id}/events?after_seq&limit&wait  the append-only log, per-run `seq`
                                              (`wait` s: long-poll for the next commit)
    GET  /v1/runs/{id}/stream                 the same as server-sent events (Last-Event-ID)

Another org's workflow or run is a 404. Recipes and inputs are bounded free JSON.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from datetime import datetime
from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import Field

from ator.api.auth import get_ator, require
from ator.api.limits import WaitSlots
from ator.api.schemas import _Body
from ator.api.sse import sse_cursor, stream_response
from ator.engine.runtime import Ator
from ator.errors import ValidationFailed
from ator.security.limits import JsonLimits, check_json
from ator.store.records import Principal
from ator.workflows import Workflows

router = APIRouter(prefix="/v1")

RECIPE = JsonLimits(max_bytes=512 * 1024, max_depth=32, max_items=20_000)
RUN_INPUT = JsonLimits(max_bytes=1024 * 1024, max_depth=32, max_items=100_000)
Name = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class WorkflowIn(_Body):
    name: str = Name


class RecipeIn(_Body):
    recipe: Any = Field(description="an ator.workflow/v1 recipe (GET /v1/workflows/schema)")


class RunIn(_Body):
    input: Any = Field(default_factory=dict)
    key: str | None = Field(default=None, min_length=1, max_length=200,
                            description="idempotency key: the same key returns the same run")
    version: int | None = Field(default=None, ge=1, description="default: the latest")


class ReasonIn(_Body):
    reason: str = Field(default="user", min_length=1, max_length=500)


def _flows(ator: Ator) -> Workflows:
    return ator.service(Workflows)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _usd(value: Any) -> str | None:
    return None if value is None else str(value)


def _workflow(row: Any) -> dict[str, Any]:
    return {"id": str(row["id"]), "name": row["name"], "latest_version": row["latest_version"],
            "created_at": _iso(row["created_at"])}


def _version(row: Any, *, recipe: bool) -> dict[str, Any]:
    out = {"workflow_id": str(row["workflow_id"]), "version": row["version"],
           "sha256": row["sha256"], "published_at": _iso(row["published_at"]),
           "published_by": str(row["published_by"]) if row["published_by"] else None}
    if recipe:
        out["recipe"] = row["recipe"]
    return out


def _run(row: Any) -> dict[str, Any]:
    return {
        "id": str(row["id"]), "workflow_id": str(row["workflow_id"]), "version": row["version"],
        "status": row["status"], "input": row["input"], "output": row["output"],
        "idempotency_key": row["idempotency_key"], "fail_reason": row["fail_reason"],
        "pause_reason": row["pause_reason"], "cancel_reason": row["cancel_reason"],
        "error": row["error"],
        "budget": {"max_steps": row["max_steps"], "steps_used": row["steps_used"],
                   "wall_clock_s": row["wall_clock_s"], "deadline": _iso(row["deadline"]),
                   "usd": _usd(row["usd_budget"]), "spent_usd": _usd(row["spent_usd"]),
                   "idle_s": row["idle_s"], "progress_at": _iso(row["progress_at"])},
        "last_seq": row["event_seq"], "created_at": _iso(row["created_at"]),
        "finished_at": _iso(row["finished_at"]),
    }


def _step(row: Any, *, output: bool) -> dict[str, Any]:
    out = {"id": str(row["id"]), "parent_id": str(row["parent_id"]) if row["parent_id"] else None,
           "path": row["path"], "type": row["type"], "status": row["status"],
           "attempt": row["attempt"], "output_size": row["output_size"],
           "preview": row["preview"], "error": row["error"], "error_code": row["error_code"],
           "cost_usd": _usd(row["cost_usd"]), "wake_at": _iso(row["wake_at"]),
           "created_at": _iso(row["created_at"]), "finished_at": _iso(row["finished_at"])}
    if output:
        out.update(spec=row["spec"], input=row["input"], output=row["output"],
                   usage=row["usage"])
    return out


def _encode(*parts: Any) -> str:
    return base64.urlsafe_b64encode("|".join(str(p) for p in parts).encode()).decode()


def _decode(cursor: str, n: int) -> list[str]:
    try:
        parts = base64.urlsafe_b64decode(cursor.encode()).decode().split("|")
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise ValidationFailed("the cursor is not valid", code="invalid_cursor") from exc
    if len(parts) != n:
        raise ValidationFailed("the cursor is not valid", code="invalid_cursor")
    return parts


def _invalid_cursor(exc: Exception) -> ValidationFailed:
    return ValidationFailed("the cursor is not valid", code="invalid_cursor")


# Recipes -------------------------------------------------------------------------------


@router.get("/workflows/schema")
async def recipe_schema(p: Principal = Depends(require("viewer")),
                        ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _flows(ator).schema


@router.post("/workflows/validate")
async def validate_recipe(body: RecipeIn, p: Principal = Depends(require("member")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    check_json(body.recipe, RECIPE, ("body", "recipe"))
    _flows(ator).validate(body.recipe)
    return {"valid": True}


@router.post("/workflows", status_code=201)
async def create_workflow(body: WorkflowIn, p: Principal = Depends(require("admin")),
                          ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _workflow(await _flows(ator).create(p.scope, body.name))


@router.get("/workflows")
async def list_workflows(p: Principal = Depends(require("viewer")),
                         ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return {"data": [_workflow(w) for w in await _flows(ator).workflows(p.scope)]}


@router.get("/workflows/{workflow_id}")
async def get_workflow(workflow_id: UUID, p: Principal = Depends(require("viewer")),
                       ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _workflow(await _flows(ator).get(p.scope, workflow_id))


@router.post("/workflows/{workflow_id}/versions", status_code=201)
async def publish(workflow_id: UUID, body: RecipeIn, p: Principal = Depends(require("admin")),
                  ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    check_json(body.recipe, RECIPE, ("body", "recipe"))
    return _version(await _flows(ator).publish(p.scope, workflow_id, body.recipe),
                    recipe=False)


@router.get("/workflows/{workflow_id}/versions")
async def list_versions(workflow_id: UUID, p: Principal = Depends(require("viewer")),
                        ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    rows = await _flows(ator).versions(p.scope, workflow_id)
    return {"data": [_version(v, recipe=False) for v in rows]}


@router.get("/workflows/{workflow_id}/versions/{version}")
async def get_version(workflow_id: UUID, version: int, p: Principal = Depends(require("viewer")),
                      ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _version(await _flows(ator).version(p.scope, workflow_id, version), recipe=True)


# Runs ------------------------------------------------------------------------------------


@router.post("/workflows/{workflow_id}/runs", status_code=201)
async def start_run(workflow_id: UUID, body: RunIn, response: Response,
                    p: Principal = Depends(require("member")),
                    ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    check_json(body.input, RUN_INPUT, ("body", "input"))
    run, created = await _flows(ator).start(p.scope, workflow_id, body.input, key=body.key,
                                            version=body.version)
    if not created:
        response.status_code = 200
    return {**_run(run), "created": created}


@router.get("/runs")
async def list_runs(p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator),
                    workflow_id: UUID | None = None, cursor: str | None = None,
                    limit: int = Query(default=50, ge=1, le=200)) -> dict[str, Any]:
    before = None
    if cursor:
        at, ident = _decode(cursor, 2)
        try:
            before = (datetime.fromisoformat(at), UUID(ident))
        except ValueError as exc:
            raise _invalid_cursor(exc) from exc
    rows = await _flows(ator).runs(p.scope, workflow_id=workflow_id, before=before,
                                   limit=limit)
    nxt = _encode(rows[-1]["created_at"].isoformat(), rows[-1]["id"]) if len(rows) == limit \
        else None
    return {"data": [_run(r) for r in rows], "next_cursor": nxt}


@router.get("/runs/{run_id}")
async def get_run(run_id: UUID, p: Principal = Depends(require("viewer")),
                  ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _run(await _flows(ator).run(p.scope, run_id))


@router.post("/runs/{run_id}/pause")
async def pause_run(run_id: UUID, body: ReasonIn | None = None,
                    p: Principal = Depends(require("member")),
                    ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    reason = body.reason if body else "user"
    return _run(await _flows(ator).pause(p.scope, run_id, reason))


@router.post("/runs/{run_id}/resume")
async def resume_run(run_id: UUID, p: Principal = Depends(require("member")),
                     ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _run(await _flows(ator).resume(p.scope, run_id))


@router.post("/runs/{run_id}/cancel")
async def cancel_run(run_id: UUID, body: ReasonIn | None = None,
                     p: Principal = Depends(require("member")),
                     ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    reason = body.reason if body else "user"
    return _run(await _flows(ator).cancel(p.scope, run_id, reason))


@router.get("/runs/{run_id}/steps")
async def list_steps(run_id: UUID, p: Principal = Depends(require("viewer")),
                     ator: Ator = Depends(get_ator), cursor: str | None = None,
                     limit: int = Query(default=100, ge=1, le=200)) -> dict[str, Any]:
    after = None
    if cursor:
        at, position, ident = _decode(cursor, 3)
        try:
            after = (datetime.fromisoformat(at), int(position), UUID(ident))
        except ValueError as exc:
            raise _invalid_cursor(exc) from exc
    rows = await _flows(ator).steps(p.scope, run_id, after=after, limit=limit)
    last = rows[-1] if len(rows) == limit else None
    nxt = _encode(last["created_at"].isoformat(), last["position"], last["id"]) if last else None
    return {"data": [_step(s, output=False) for s in rows], "next_cursor": nxt}


@router.get("/runs/{run_id}/steps/{step_id}")
async def get_step(run_id: UUID, step_id: UUID, p: Principal = Depends(require("viewer")),
                   ator: Ator = Depends(get_ator)) -> dict[str, Any]:
    return _step(await _flows(ator).step(p.scope, run_id, step_id), output=True)


@router.get("/runs/{run_id}/events")
async def run_events(run_id: UUID, request: Request, p: Principal = Depends(require("viewer")),
                     ator: Ator = Depends(get_ator), after_seq: int = Query(default=0, ge=0),
                     limit: int = Query(default=100, ge=1, le=1000),
                     wait: float = Query(default=0, ge=0, le=60)) -> dict[str, Any]:
    if wait > 0:  # long-poll, like a thread's events: the next commit within `wait` s
        slots: WaitSlots = request.app.state.wait_slots
        with slots.hold(p.org_id, p.user_id):
            frames = await ator.wait_run_events(p.scope, run_id, after_seq=after_seq,
                                                timeout=wait, limit=limit)
        events = [{"seq": f["seq"], "kind": f["type"], "data": f["data"]["data"],
                   "created_at": f["data"]["created_at"]} for f in frames]
    else:
        rows = await _flows(ator).events(p.scope, run_id, after=after_seq, limit=limit)
        events = [{"seq": e["seq"], "kind": e["kind"], "data": e["data"],
                   "created_at": _iso(e["created_at"])} for e in rows]
    return {"data": events, "next_after_seq": events[-1]["seq"] if events else after_seq}


@router.get("/runs/{run_id}/stream")
async def stream_run(run_id: UUID, request: Request,
                     after_seq: int = Query(default=0, ge=0, le=2**62),
                     last_event_id: str | None = Header(default=None, max_length=32),
                     p: Principal = Depends(require("viewer")),
                     ator: Ator = Depends(get_ator)) -> StreamingResponse:
    """The run's events as server-sent events, like a thread's stream (api/sse.py)."""
    cursor = sse_cursor(last_event_id, after_seq)
    slots: WaitSlots = request.app.state.wait_slots
    held = contextlib.ExitStack()
    held.enter_context(slots.hold(p.org_id, p.user_id))
    try:
        frames = await ator.run_frames(p.scope, run_id, after_seq=cursor, keepalive=15.0)
    except BaseException:
        held.close()
        raise

    return stream_response(frames, held, "run")
