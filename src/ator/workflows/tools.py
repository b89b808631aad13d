"""The workflow tools an agent calls (layer: workflows; imports errors, store, tools,
workflows.service, workflows.told).

    list_workflows   the org's workflows with their latest input schema
    start_workflow   start a run of one (by id or name); idempotent per tool call; its
                     result comes back by itself, once, when the run ends (workflows/told.py)
    workflow_status  a run's state and (paged) output, as data
    cancel_workflow  cancel a run this conversation started

Handlers reach `Workflows` through `ToolContext.service`, so a turn not granted it gets a
plain error result. A run's budget is the recipe's, lowered by what the call asks
(`max_steps`, `wall_clock_s`, `usd`); asking for more than the recipe allows is refused. Its
spend goes through the org's ledger like the turn's own (a run outlives the turn that
started it, so the turn's caps cannot hold it).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ator import jsonenc
from ator.errors import AtorError, NotFound, ToolError
from ator.store import run_origins as origin_store
from ator.store.run_origins import Origin
from ator.store.scope import Scope
from ator.tools.base import Tool, ToolContext
from ator.workflows.service import Workflows
from ator.workflows.told import RunTeller

__all__ = ["GOVERNANCE", "workflow_tools"]

# The tools that act on runs (start one, cancel one): denied inside a run's own agent steps
# (workflows/agents.py), so a step can neither cancel its run nor start runs beside its
# budget; a sub-run is a `workflow` step, and a gate is decided by a person only.
GOVERNANCE = ("start_workflow", "cancel_workflow")

_PAGE_CHARS = 8000
_SCHEMA_CHARS = 2000
_RUN = {"type": "string", "minLength": 1, "maxLength": 64,
        "description": "The run's id (from start_workflow)."}

START_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workflow": {"type": "string", "minLength": 1, "maxLength": 200,
                     "description": "The workflow's id or name (from list_workflows)."},
        "input": {"description": "The run's input, matching the workflow's input schema."},
        "budget": {"type": "object", "additionalProperties": False, "properties": {
            "max_steps": {"type": "integer", "minimum": 1, "maximum": 100_000},
            "wall_clock_s": {"type": "number", "exclusiveMinimum": 0},
            "usd": {"type": "number", "exclusiveMinimum": 0, "maximum": 100_000},
        }},
    },
    "required": ["workflow"],
    "additionalProperties": False,
}


async def _find(flows: Workflows, scope: Scope, ref: str) -> Any:
    try:
        return await flows.get(scope, UUID(ref))
    except (ValueError, NotFound):
        pass
    for row in await flows.workflows(scope, limit=1000):
        if row["name"] == ref:
            return row
    raise ToolError(f"no workflow {ref!r}; call list_workflows")


def _run_id(args: dict[str, Any]) -> UUID:
    try:
        return UUID(str(args["run_id"]))
    except ValueError:
        raise ToolError("run_id is not a run's id (start_workflow returns it)") from None


async def _list(args: dict[str, Any], ctx: ToolContext) -> Any:
    flows, scope = ctx.service(Workflows), Scope(ctx.org_id)
    out = []
    for row in await flows.workflows(scope, limit=200):
        item: dict[str, Any] = {"id": str(row["id"]), "name": row["name"],
                                "latest_version": row["latest_version"]}
        if row["latest_version"]:
            recipe = (await flows.version(scope, row["id"], None))["recipe"]
            schema = jsonenc.dumps(recipe.get("input", {}))
            item["input_schema"] = (schema if len(schema) <= _SCHEMA_CHARS
                                    else schema[:_SCHEMA_CHARS] + "… (cut)")
            item["budget"] = recipe.get("budget", {})
        out.append(item)
    return {"workflows": out}


async def _start(args: dict[str, Any], ctx: ToolContext) -> Any:
    flows, scope = ctx.service(Workflows), Scope(ctx.org_id)
    thread_id, turn_id = ctx.in_turn()
    workflow = await _find(flows, scope, str(args["workflow"]))
    if not workflow["latest_version"]:
        raise ToolError(f"workflow {workflow['name']!r} has no published version")
    budget = dict(args.get("budget") or {})
    own = (await flows.version(scope, workflow["id"], None))["recipe"].get("budget", {})
    for key in ("max_steps", "wall_clock_s", "usd"):
        if key in budget and key in own and budget[key] > own[key]:
            raise ToolError(f"budget.{key} {budget[key]} is above the workflow's own "
                            f"{own[key]}: a run's budget can only be lowered")
    try:
        run, created = await flows.start(
            scope, workflow["id"], args.get("input", {}),
            key=f"call:{thread_id}:{ctx.tool_use_id}", budget=budget,
            origin=Origin(thread_id=thread_id, tool_use_id=ctx.tool_use_id, budget=budget))
    except AtorError as exc:
        if exc.status >= 500:
            raise
        raise ToolError(exc.message) from None
    ctx.service(RunTeller).started_in.add(turn_id)
    return {"run_id": str(run["id"]), "workflow": workflow["name"], "status": run["status"],
            "created": created,
            "budget": {"max_steps": run["max_steps"], "wall_clock_s": run["wall_clock_s"],
                       "usd": None if run["usd_budget"] is None else str(run["usd_budget"])},
            "note": "The run's result arrives by itself as a message when it ends; do not "
                    "poll."}


async def _status(args: dict[str, Any], ctx: ToolContext) -> Any:
    flows, scope = ctx.service(Workflows), Scope(ctx.org_id)
    try:
        run = await flows.run(scope, _run_id(args))
    except NotFound:
        raise ToolError(f"no run {args['run_id']!r}") from None
    page = int(args.get("page", 1))
    body = "" if run["output"] is None else jsonenc.dumps(run["output"])
    pages = max(1, -(-len(body) // _PAGE_CHARS))
    if page > pages:
        raise ToolError(f"page {page} does not exist: the output has {pages} page(s)")
    return {"run_id": str(run["id"]), "status": run["status"],
            "reason": run["fail_reason"] or run["cancel_reason"] or run["pause_reason"],
            "error": run["error"], "steps_used": run["steps_used"],
            "max_steps": run["max_steps"],
            "output": body[(page - 1) * _PAGE_CHARS:page * _PAGE_CHARS],
            "page": page, "pages": pages}


async def _cancel(args: dict[str, Any], ctx: ToolContext) -> Any:
    flows, scope = ctx.service(Workflows), Scope(ctx.org_id)
    thread_id, _ = ctx.in_turn()
    run_id = _run_id(args)
    origin = await origin_store.get(flows.db, scope, run_id)
    if origin is None or origin["thread_id"] != thread_id:
        raise ToolError(f"no run {args['run_id']!r} started by this conversation")
    try:
        run = await flows.cancel(scope, run_id, reason=f"agent: {args.get('reason', '')}"[:500])
    except AtorError as exc:
        raise ToolError(exc.message) from None
    return {"run_id": str(run["id"]), "status": run["status"],
            "note": "Its result (cancelled) arrives by itself as a message."}


def workflow_tools() -> list[Tool]:
    return [
        Tool("list_workflows", "The workflows you can start, with their input schema.",
             {"type": "object", "properties": {}, "additionalProperties": False}, _list,
             read_only=True),
        Tool("start_workflow",
             "Start a run of a workflow. Returns at once with the run's id; its result "
             "arrives later by itself.", START_SCHEMA, _start, turn_only=True),
        Tool("workflow_status", "A workflow run's state and output (one page at a time).",
             {"type": "object", "properties": {"run_id": _RUN, "page": {
                 "type": "integer", "minimum": 1, "maximum": 100_000}},
              "required": ["run_id"], "additionalProperties": False},
             _status, read_only=True, origin="workflow", untrusted=True),
        Tool("cancel_workflow", "Cancel a workflow run this conversation started.",
             {"type": "object", "properties": {"run_id": _RUN, "reason": {
                 "type": "string", "minLength": 1, "maxLength": 500}},
              "required": ["run_id"], "additionalProperties": False}, _cancel,
             turn_only=True),
    ]
