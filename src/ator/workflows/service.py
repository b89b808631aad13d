"""The workflows service: recipes, versions, runs and their lifecycle (layer: workflows;
imports ator.errors, ator.jobs, ator.settings, ator.store, ator.workflows.*).

What the API and the CLI call (`Ator.service(Workflows)`). Every call takes the caller's
org scope; another org's workflow or run is NotFound. A start validates the input against
the pinned recipe's input schema before anything is written, and is idempotent per
(org, key): the same key returns the same run (`created` False), also under a race.
Pause, resume and cancel reach the run's open sub-runs (`workflow` steps' children, at any
depth) in the same transaction. They are conditional transitions: on a run not in a state
that allows them they raise Conflict, and a terminal run stays terminal.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from ator.coord.base import Coordinator
from ator.coord.catalog import catalog_changed
from ator.errors import Conflict, NotFound
from ator.jobs import JobQueue
from ator.settings import Settings
from ator.store import run_origins as origin_store
from ator.store import subruns
from ator.store import workflow_steps as step_store
from ator.store import workflows as run_store
from ator.store.database import Connection, Database, Row
from ator.store.run_origins import Origin
from ator.store.scope import Scope
from ator.store.workflows import NewRun
from ator.workflows.kinds import wake
from ator.workflows.recipe import Limits, Recipes, validate_input
from ator.workflows.step_types import StepTypes
from ator.workflows.types import builtin_types

__all__ = ["Workflows"]


class Workflows:
    def __init__(self, db: Database, queue: JobQueue, settings: Settings,
                 coord: Coordinator | None = None, types: StepTypes | None = None) -> None:
        self.db = db
        self.coord = coord  # where a newly published version is announced
        self.queue = queue
        self.settings = settings
        self.limits = Limits(settings.workflow_max_steps_ceiling,
                             settings.workflow_wall_clock_ceiling,
                             usd=settings.workflow_usd_ceiling,
                             idle_s=settings.workflow_idle_ceiling)
        self.recipes = Recipes(types or StepTypes(builtin_types()), self.limits)

    @property
    def schema(self) -> dict[str, Any]:
        """The published JSON Schema of a recipe (every registered step type)."""
        return self.recipes.schema

    # Recipes -------------------------------------------------------------------------------

    def validate(self, recipe: Any) -> dict[str, Any]:
        """Check a recipe (ValidationFailed `recipe_invalid` with each error's pointer)."""
        return self.recipes.validate(recipe)

    async def create(self, scope: Scope, name: str) -> Row:
        return await run_store.create_workflow(self.db, scope, name)

    async def get(self, scope: Scope, workflow_id: UUID) -> Row:
        found = await run_store.get_workflow(self.db, scope, workflow_id)
        if found is None:
            raise NotFound("no such workflow")
        return found

    async def workflows(self, scope: Scope, limit: int = 100) -> list[Row]:
        return await run_store.list_workflows(self.db, scope, limit)

    async def publish(self, scope: Scope, workflow_id: UUID, recipe: Any) -> Row:
        """Publish the next immutable version. Raises ValidationFailed / NotFound."""
        checked = self.validate(recipe)
        digest = hashlib.sha256(json.dumps(checked, sort_keys=True,
                                           separators=(",", ":")).encode()).hexdigest()
        made = await run_store.publish(self.db, scope, workflow_id, checked, digest)
        if made is None:
            raise NotFound("no such workflow")
        await catalog_changed(self.coord, scope.org_id, "workflow")
        return made

    async def version(self, scope: Scope, workflow_id: UUID, version: int | None) -> Row:
        """A version (the latest when None). Raises NotFound."""
        await self.get(scope, workflow_id)
        found = await run_store.get_version(self.db, scope, workflow_id, version)
        if found is None:
            raise NotFound("no such version" if version else "the workflow has no published "
                           "version")
        return found

    async def versions(self, scope: Scope, workflow_id: UUID, limit: int = 100) -> list[Row]:
        await self.get(scope, workflow_id)
        return await run_store.list_versions(self.db, scope, workflow_id, limit)

    # Runs ---------------------------------------------------------------------------------

    async def plan(self, scope: Scope, workflow_id: UUID, input: Any, *,
                   key: str | None = None, version: int | None = None,
                   budget: Mapping[str, Any] | None = None) -> NewRun:
        """A run of a published version as it would start: its input checked, its budgets
        the recipe's within the operator's ceilings, lowered by `budget`."""
        pinned = await self.version(scope, workflow_id, version)
        recipe: dict[str, Any] = pinned["recipe"]
        validate_input(recipe, input)
        own = recipe.get("budget", {})
        given = budget or {}
        s = self.settings
        max_steps = min(own.get("max_steps", s.workflow_max_steps), s.workflow_max_steps_ceiling)
        wall_clock = min(float(own.get("wall_clock_s", s.workflow_wall_clock)),
                         s.workflow_wall_clock_ceiling)
        if given.get("max_steps") is not None:
            max_steps = min(max_steps, int(given["max_steps"]))
        if given.get("wall_clock_s") is not None:
            wall_clock = min(wall_clock, float(given["wall_clock_s"]))
        usd = min(Decimal(str(own.get("usd", s.workflow_usd))),
                  Decimal(str(s.workflow_usd_ceiling)))
        if given.get("usd") is not None:
            usd = min(usd, Decimal(str(given["usd"])))
        return NewRun(workflow_id=workflow_id, version=pinned["version"], recipe=recipe,
                      input=input, idempotency_key=key, max_steps=max_steps,
                      wall_clock_s=wall_clock, usd_budget=usd,
                      idle_s=min(float(own.get("idle_s", s.workflow_idle)),
                                 s.workflow_idle_ceiling))

    async def start(self, scope: Scope, workflow_id: UUID, input: Any, *,
                    key: str | None = None, version: int | None = None,
                    budget: Mapping[str, Any] | None = None,
                    origin: Origin | None = None) -> tuple[Row, bool]:
        """Start a run of a published version (the latest by default): (run, created).
        `budget` (`max_steps`, `wall_clock_s`, `usd`) can only lower the recipe's; `origin` (a
        schedule's tick, a conversation's tool call) is written with the run. Raises
        NotFound, ValidationFailed (`input_invalid`), or Conflict when the key belongs to a
        run of another workflow."""
        new = await self.plan(scope, workflow_id, input, key=key, version=version,
                              budget=budget)
        async with self.db.begin() as conn:
            run, created = await run_store.start_run(conn, scope, new)
            if created:
                if origin is not None:
                    await origin_store.insert(conn, scope, run["id"], origin)
                await self._changed(conn, scope, run["id"], "run_started",
                                    {"version": run["version"]})
        if run["workflow_id"] != workflow_id:
            raise Conflict("this idempotency key started a run of another workflow",
                           code="idempotency_conflict")
        return run, created

    async def run(self, scope: Scope, run_id: UUID) -> Row:
        found = await run_store.get_run(self.db, scope, run_id)
        if found is None:
            raise NotFound("no such run")
        return found

    async def runs(self, scope: Scope, *, workflow_id: UUID | None = None,
                   before: tuple[datetime, UUID] | None = None, limit: int = 50) -> list[Row]:
        return await run_store.list_runs(self.db, scope, workflow_id=workflow_id,
                                         before=before, limit=limit)

    async def pause(self, scope: Scope, run_id: UUID, reason: str = "user") -> Row:
        """Pause gracefully: no new step starts; steps in flight finish."""
        async with self.db.begin() as conn:
            await subruns.lock_tree(conn, scope, run_id)
            row = await run_store.pause(conn, scope, run_id, reason)
            if row is not None:
                await self._paused(conn, scope, row, reason)
                for child in await subruns.descendants(conn, scope, run_id):
                    paused = await run_store.pause(conn, scope, child, "parent")
                    if paused is not None:
                        await self._paused(conn, scope, paused, "parent")
        return row or await self._refused(scope, run_id, "paused", "running")

    async def resume(self, scope: Scope, run_id: UUID) -> Row:
        """Resume a paused run (its failed steps run again)."""
        async with self.db.begin() as conn:
            await subruns.lock_tree(conn, scope, run_id)
            row = await run_store.resume(conn, scope, run_id)
            if row is not None:
                await self._changed(conn, scope, run_id, "run_resumed", {})
                for child in await subruns.descendants(conn, scope, run_id):
                    if await run_store.resume(conn, scope, child) is not None:
                        await self._changed(conn, scope, child, "run_resumed", {})
        return row or await self._refused(scope, run_id, "resumed", "paused")

    async def cancel(self, scope: Scope, run_id: UUID, reason: str = "user") -> Row:
        """Cancel: terminal at once; steps in flight finish, queued ones never start."""
        async with self.db.begin() as conn:
            await subruns.lock_tree(conn, scope, run_id)
            row = await run_store.cancel(conn, scope, run_id, reason)
            if row is not None:
                await self._changed(conn, scope, run_id, "run_cancelled", {"reason": reason})
                for child in await subruns.descendants(conn, scope, run_id):
                    if await run_store.cancel(conn, scope, child, "parent") is not None:
                        await self._changed(conn, scope, child, "run_cancelled",
                                            {"reason": "parent"})
        return row or await self._refused(scope, run_id, "cancelled", "running or paused")

    async def steps(self, scope: Scope, run_id: UUID, *,
                    after: tuple[datetime, int, UUID] | None = None,
                    limit: int = 100) -> list[Row]:
        """A page of the run's steps without outputs (preview ≤ 2 KB and size instead)."""
        await self.run(scope, run_id)
        return await step_store.list_steps(self.db, scope, run_id, after=after, limit=limit)

    async def step(self, scope: Scope, run_id: UUID, step_id: UUID) -> Row:
        """One step with its whole output."""
        found = await step_store.get_step(self.db, scope, run_id, step_id)
        if found is None:
            raise NotFound("no such step")
        return found

    async def events(self, scope: Scope, run_id: UUID, *, after: int = 0,
                     limit: int = 100) -> list[Row]:
        """The run's events with seq above `after`, in order."""
        await self.run(scope, run_id)
        return await run_store.events(self.db, scope, run_id, after=after, limit=limit)

    async def _paused(self, conn: Connection, scope: Scope, row: Row, reason: str) -> None:
        await self._changed(conn, scope, row["id"], "run_paused", {"reason": reason})
        # Pauses expire: the reconciler cancels a run still paused by then.
        expiry = row["paused_at"] + timedelta(seconds=self.settings.workflow_pause_ttl)
        await wake(self.queue, conn, scope, row["id"], at=expiry, timer="pause")

    async def _changed(self, conn: Connection, scope: Scope, run_id: UUID, kind: str,
                       data: dict[str, Any]) -> None:
        await run_store.add_event(conn, run_id, kind, data, bump=True)
        await wake(self.queue, conn, scope, run_id)

    async def _refused(self, scope: Scope, run_id: UUID, verb: str, needs: str) -> Row:
        run = await self.run(scope, run_id)  # NotFound for another org's run
        raise Conflict(f"the run is {run['status']}; only a {needs} run can be {verb}",
                       code="run_state_conflict")
