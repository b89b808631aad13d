"""What the workflow tests share: an org, a published recipe, waiting for a run's state."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from ator.engine.runtime import Ator
from ator.store.scope import Scope
from ator.workflows import Workflows

TERMINAL = {"succeeded", "failed", "cancelled"}


async def org(ator: Ator, **kwargs: Any) -> Scope:
    made = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}", **kwargs)
    return Scope(made.id)


async def published(ator: Ator, scope: Scope, recipe: dict[str, Any]) -> uuid.UUID:
    flows = ator.service(Workflows)
    workflow = await flows.create(scope, f"wf-{uuid.uuid4().hex[:6]}")
    await flows.publish(scope, workflow["id"], recipe)
    return uuid.UUID(str(workflow["id"]))


async def settled(ator: Ator, scope: Scope, run_id: Any, *, timeout: float = 60.0,
                  until: set[str] | None = None) -> Any:
    """Read the run (each read a query) until its status is in `until` (default: terminal)."""
    flows = ator.service(Workflows)
    want = until or TERMINAL
    deadline = time.monotonic() + timeout
    while True:
        run = await flows.run(scope, run_id)
        if run["status"] in want:
            return run
        assert time.monotonic() < deadline, f"run stayed {run['status']}: {run['error']}"
        await asyncio.sleep(0.05)


def recipe(*steps: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"schema": "ator.workflow/v1", "steps": list(steps), **extra}


async def steps_of(ator: Ator, scope: Scope, run_id: Any) -> dict[str, Any]:
    """Every step of the run by path, with its output (the API's one-step read)."""
    flows = ator.service(Workflows)
    rows = await flows.steps(scope, run_id, limit=10_000)
    return {r["path"]: await flows.step(scope, run_id, r["id"]) for r in rows}
