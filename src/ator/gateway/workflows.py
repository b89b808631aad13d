"""An org's published workflows as tools of the gateway's catalog (layer: gateway; imports
workflows, tools, store.scope).

One tool per workflow with a published version, named `workflow__<name>` (a workflow's
name is unique in its org and made of `[A-Za-z0-9._-]`, so the name is a valid MCP tool
name; one longer than MCP's 128 characters is named by its id, `workflow__<id hex>`). Its
input schema is the latest version's `input` schema (none: any object); a recipe whose
input is not an object
is offered as `{"input": <its schema>}` (MCP tools take an object) and unwrapped before
the run starts. The tool changes things (`read_only` false: a viewer's key does not see
it) and its result is labelled untrusted (a run's output can carry what its agent steps
read, invariant 8).

A call starts a run of the listed version through `Workflows.start`, which validates the
input and gives the run the recipe's budget (steps and wall clock, under the operator's
ceilings). The answer rule: the call waits up to `wait` seconds (5 by default, below the
gateway's tool timeout) for the run to end; a run that ended answers its status and output
(or its failure), one still going answers its id and status `running` (or `paused`) and
where to follow it (`GET /v1/runs/{id}`). Waiting reads the run's row, at first every
25 ms, growing to every 250 ms: the run may be driven by any replica's workers and ends in
the database, which is what is read.

Recipes of a published version never change, so each (workflow, version) tool is built
once per process (a bounded memo). The org's list of workflows (one query) is kept for
`ttl` seconds (`ATOR_MCP_CATALOG_TTL`, the rule of the upstream servers' catalog) and
dropped at once when this replica hears that the org's catalog changed (`forget`, from
gateway/changes.py), so a client told `list_changed` lists the new version.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from ator import jsonenc
from ator.engine.recent import Recent
from ator.store.scope import Scope
from ator.tools.base import Tool, ToolContext, ToolResult
from ator.tools.toolset import OrgToolScope
from ator.workflows import Workflows

__all__ = ["PREFIX", "WorkflowTools"]

PREFIX = "workflow__"
_MAX_NAME = 128
_ENDED = frozenset({"succeeded", "failed", "cancelled"})
_MEMO = 4096


class WorkflowTools:
    """The org's published workflows, one tool each (an `OrgToolset`: outside turns only)."""

    name = "workflows"

    def __init__(self, workflows: Workflows, *, wait: float = 5.0, ttl: float = 5.0) -> None:
        self._flows = workflows
        self._wait = wait
        self._built: dict[tuple[UUID, int], Tool] = {}
        self._listed = Recent(ttl)

    def forget(self, org_id: UUID) -> None:
        """The org's catalog changed: list its workflows again at the next call."""
        self._listed.drop(org_id)

    async def org_tools(self, scope: OrgToolScope) -> Sequence[Tool]:
        found: list[Tool] | None = self._listed.get(scope.org_id)
        if found is None:
            found = await self._read(scope.org_id)
            self._listed.put(scope.org_id, found)
        return found

    async def _read(self, org_id: UUID) -> list[Tool]:
        org = Scope(org_id)
        out: list[Tool] = []
        for row in await self._flows.workflows(org, limit=500):
            version = row["latest_version"]
            if not version:
                continue  # created, nothing published yet
            key = (row["id"], int(version))
            tool = self._built.get(key)
            if tool is None:
                pinned = await self._flows.version(org, row["id"], int(version))
                tool = self._tool(row["id"], row["name"], pinned["version"], pinned["recipe"])
                if len(self._built) >= _MEMO:
                    self._built.pop(next(iter(self._built)))
                self._built[key] = tool
            out.append(tool)
        return out

    def _tool(self, workflow_id: UUID, name: str, version: int, recipe: dict[str, Any]
              ) -> Tool:
        schema = recipe.get("input") or {"type": "object"}  # none: any object
        wrapped = not (isinstance(schema, dict) and schema.get("type") == "object")
        if wrapped:
            schema = {"type": "object", "properties": {"input": schema},
                      "required": ["input"], "additionalProperties": False}
        tool_name = PREFIX + name
        if len(tool_name) > _MAX_NAME:
            tool_name = PREFIX + workflow_id.hex
        about = str(recipe.get("description") or f"Run the workflow {name!r}.")
        description = (f"{about}\n\nStarts a run of version {version}; answers its output "
                       f"if it ends within {self._wait:g} s, else its run id and status.")

        async def start(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            run_input = args.get("input") if wrapped else args
            run, _ = await self._flows.start(Scope(ctx.org_id), workflow_id, run_input,
                                             version=version)
            run = await self._settled(Scope(ctx.org_id), run)
            return _answer(run)

        return Tool(tool_name, description, schema, start, timeout=self._wait + 10.0,
                    read_only=False, origin="workflow", untrusted=True)

    async def _settled(self, scope: Scope, run: Any) -> Any:
        """The run once it ended, or as it stands after `wait` seconds."""
        deadline = time.monotonic() + self._wait
        pause = 0.025
        while run["status"] not in _ENDED:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            await asyncio.sleep(min(pause, left))  # the run ends in the database: read it
            pause = min(pause * 1.5, 0.25)
            run = await self._flows.run(scope, run["id"])
        return run


def _answer(run: Any) -> ToolResult:
    status = str(run["status"])
    body: dict[str, Any] = {"run_id": str(run["id"]), "status": status,
                            "steps_used": run["steps_used"]}
    if status == "succeeded":
        body["output"] = run["output"]
    elif status in _ENDED:
        body["reason"] = run["fail_reason"] or run["cancel_reason"]
        body["error"] = run["error"]
    else:
        if run["pause_reason"]:
            body["reason"] = run["pause_reason"]
        body["follow"] = f"/v1/runs/{run['id']}"
    meta = {"code": f"workflow_{status}"} if status in ("failed", "cancelled") else {}
    return ToolResult(jsonenc.dumps(body), is_error=bool(meta), meta=meta)
