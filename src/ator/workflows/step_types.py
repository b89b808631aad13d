"""The step-type seam: every step type is a small object registered in `StepTypes`
(layer: workflows; imports ator.errors, ator.jobs, ator.store, ator.workflows.expressions).

A step type says, for its `type` name:

- `schema` / `child_schema`: its JSON Schema as a top-level step (with `id`) and, for a type
  that can run inside an expander (`map`'s `step`, a `switch` branch, …), as a child; a
  type with no `child_schema` is top-level only. The recipe's published schema is built
  from the registry (`recipe.recipe_schema`).
- `expressions(spec)` and `children(spec)`: where its JSONata expressions and its child
  steps sit (relative JSON pointers), so a recipe is checked everywhere at its pointer;
  `check(spec)` adds what a schema cannot say.
- `create(tick, new)`: the reconciler's first look at the step (charge `max_steps`, write
  rows, queue attempts); `advance(tick, spec, row)`: each later look, while the step is
  not `done`, `skipped` or `failed`. Both return a `Progress`: True (go on to the next
  step), False (stop here; a change wakes the reconciler), or a time to look again.
- `run(attempt)`: for an executable type, one attempt's work on a worker; its value is the
  step's output, stored in the transaction that completes the attempt's job. `StepError`
  (and an expression's own error) fails the step at once; anything else is retried.

The reconciler and the step runner name no type: a new type (the `human` gate, a
sub-run) registers here and plugs in without editing either.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar
from uuid import UUID

from ator.errors import AtorError
from ator.jobs import JobContext, JobQueue
from ator.store import workflow_steps as step_store
from ator.store import workflows as run_store
from ator.store.database import Connection, Database, Row
from ator.store.scope import Scope
from ator.store.workflow_steps import ClaimedStep, NewStep
from ator.store.workflows import RunFence
from ator.workflows.expressions import Expressions
from ator.workflows.kinds import STEP

__all__ = ["CHILD", "EXPR", "Attempt", "Executable", "Progress", "StepError",
           "StepType", "StepTypes", "Tick", "child_schema", "step_schema"]

# What looking at a step says: go on to the next step, stop here, or stop and come back then.
Progress = bool | datetime
Path = tuple[str | int, ...]


class StepError(AtorError):
    """A step's own deterministic failure: another attempt would fail alike."""

    kind = "workflow"
    code = "step_failed"
    status = 422


class Tick:
    """What one reconciler tick works on, and the writes a step type may make in it: all in
    the tick's transaction, under the run row's lock and the reconciler's lease."""

    __slots__ = ("conn", "expressions", "owner", "queue", "run", "scope", "types",
                 "value_bytes")

    def __init__(self, conn: Connection, scope: Scope, run: RunFence, owner: str, *,
                 queue: JobQueue, expressions: Expressions, value_bytes: int,
                 types: StepTypes) -> None:
        self.types = types
        self.conn = conn
        self.scope = scope
        self.run = run
        self.owner = owner
        self.queue = queue
        self.expressions = expressions
        self.value_bytes = value_bytes

    async def context(self) -> dict[str, Any]:
        """What a top-level step's expressions see: `{input, steps}`."""
        return {"input": self.run.input,
                "steps": await step_store.top_outputs(self.conn, self.run.id)}

    async def evaluate(self, expr: str, data: Any) -> Any:
        return await self.expressions.evaluate(expr, data)

    async def insert(self, step: NewStep) -> UUID:
        return await step_store.insert(self.conn, step)

    def child(self, parent: UUID, path: str, position: int, spec: dict[str, Any], *,
              status: str = "queued", input: Any = None) -> NewStep:
        return NewStep(self.run.id, self.run.org_id, path, position, spec["type"], spec,
                       status, parent_id=parent, input=input)

    async def event(self, kind: str, data: dict[str, Any]) -> None:
        await run_store.add_event(self.conn, self.run.id, kind, data, bump=False)

    async def charge(self, spec: dict[str, Any], n: int) -> bool:
        """Count `n` steps against `max_steps`; when they do not fit, fail the run
        (`max_steps`) and return False, having created nothing."""
        if await step_store.charge(self.conn, self.run.id, n):
            return True
        await self.fail_run("max_steps", f"step {spec.get('id', '?')!r} needs {n} step(s); "
                            f"the run has used {self.run.steps_used} of its "
                            f"{self.run.max_steps}")
        return False

    async def refund(self, n: int) -> None:
        """Give back steps charged for but never made (a loop that stopped early)."""
        if n > 0:
            await step_store.charge(self.conn, self.run.id, -n)

    async def enqueue(self, step_ids: Iterable[UUID], batch: int = 1) -> None:
        """Queue attempts of these steps, up to `batch` of them per job (their type's
        `StepType.batch`), split evenly: 50 steps of batch 10 are 5 jobs of 10."""
        ids = [str(s) for s in step_ids]
        if ids:
            run_id = str(self.run.id)
            jobs = -(-len(ids) // max(1, batch))
            await self.queue.enqueue_many(
                self.scope, STEP, [{"run_id": run_id, "step_ids": ids[i::jobs]}
                                   for i in range(jobs)], within=self.conn)

    async def requeue(self, step_id: UUID) -> None:
        """A step handed back while the run was paused (or failed, then resumed) runs again."""
        if await step_store.set_status(self.conn, step_id, "queued", ["pending"]):
            await self.enqueue([step_id])

    async def done(self, step_id: UUID, path: str, output: Any) -> bool:
        """Finish an expander with `output` (False: over the value cap, the step failed)."""
        if await step_store.finish_with(self.conn, step_id, output, self.value_bytes):
            await self.event("step_done", {"step": path})
            return True
        return False

    async def failed(self, spec: dict[str, Any], path: str, error: str,
                     code: str | None = None) -> Progress:
        """A step failed: pause the run naming it, or fail the run when `on_error` says so;
        a step that failed on the run's usd budget ends the run `budget`, whatever it says."""
        on_error = spec.get("on_error") or self.run.recipe.get("on_error") or "pause"
        message = f"step {path!r} failed: {error}"
        if code == "budget":
            await self.fail_run("budget", message)
        elif on_error == "fail":
            await self.fail_run("step_failed", message)
        elif await run_store.pause_failed(self.conn, self.run.id, self.owner,
                                          reason=f"step_failed:{path}", error=message):
            await self.event("run_paused", {"reason": f"step_failed:{path}", "error": message})
        return False

    async def fail_step(self, step_id: UUID, spec: dict[str, Any], path: str,
                        error: str, code: str | None = None) -> Progress:
        await step_store.fail(self.conn, step_id, error)
        return await self.failed(spec, path, error, code)

    async def created_failed(self, new: NewStep, error: str) -> Progress:
        """A step that failed while being created (its `over` expression, say)."""
        step_id = await self.insert(replace(new, status="running"))
        return await self.fail_step(step_id, new.spec, new.path, error)

    async def fail_run(self, reason: str, error: str) -> None:
        """End the run `failed` with a typed reason (its one closing transaction is the
        tick's; what else a close writes comes with its end event: store/workflows.py)."""
        if await run_store.finish(self.conn, self.run.id, self.owner, status="failed",
                                  fail_reason=reason, error=error):
            await self.event("run_failed", {"reason": reason, "error": error})

    async def counts(self, parent: UUID) -> dict[str, int]:
        return await step_store.counts(self.conn, parent)

    async def children(self, parent: UUID) -> list[Row]:
        return await step_store.children(self.conn, parent)


@dataclass
class Attempt:
    """One attempt of an executable step on a worker."""

    db: Database
    scope: Scope
    step: ClaimedStep
    job: JobContext
    expressions: Expressions
    # What the attempt spent (an agent turn's), stored with its output.
    usage: dict[str, Any] = field(default_factory=dict)
    cost_usd: Decimal = Decimal(0)

    async def data(self) -> dict[str, Any]:
        """What the step's expressions see: a map item `{input, item, index}`; any other
        step `{input, steps}` plus what its expander gave it (`iteration`, `left`, …)."""
        extra = self.step.input if isinstance(self.step.input, dict) else {}
        if "item" in extra:
            return {"input": self.step.run_input, "item": extra["item"],
                    "index": extra.get("index")}
        return {"input": self.step.run_input,
                "steps": await step_store.top_outputs(self.db, self.step.run_id), **extra}

    async def evaluate(self, expr: str, data: Any) -> Any:
        return await self.expressions.evaluate(expr, data)


def step_schema(kind: str, required: Iterable[str] = (), *,
                one_of: list[dict[str, Any]] | None = None, **props: Any) -> dict[str, Any]:
    """A top-level step's schema: `id`, `type` and the common keys, plus `props`."""
    extra = {"oneOf": one_of} if one_of else {}
    return {**extra, "type": "object", "required": ["id", "type", *required],
            "additionalProperties": False,
            "properties": {"id": {"$ref": "#/$defs/id"}, "on_error": {"enum": ["pause", "fail"]},
                           "description": {"type": "string", "maxLength": 2_000},
                           "type": {"const": kind}, **props}}


def child_schema(kind: str, required: Iterable[str] = (), **props: Any) -> dict[str, Any]:
    """The same type as a child of an expander (no `id`: its path names it)."""
    return {"type": "object", "required": ["type", *required], "additionalProperties": False,
            "properties": {"type": {"const": kind}, **props}}


EXPR = {"$ref": "#/$defs/expr"}
CHILD = {"$ref": "#/$defs/child"}


class StepType:
    """Base class: override what the type does. `name` is its `type` in a recipe."""

    name: ClassVar[str] = ""
    schema: ClassVar[dict[str, Any]] = {}
    child_schema: ClassVar[dict[str, Any] | None] = None
    #: keys of the spec holding a JSONata expression
    exprs: ClassVar[tuple[str, ...]] = ()
    #: how many attempts of this type one job may carry: a cheap, pure type many (one
    #: claim and one completion serve them all); a type that waits on a peer one, so a slow
    #: attempt never holds back the others' completion
    batch: ClassVar[int] = 1

    def expressions(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        for key in self.exprs:
            if isinstance(spec.get(key), str):
                yield (key,), spec[key]

    def children(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, dict[str, Any]]]:
        return iter(())

    def check(self, spec: Mapping[str, Any]) -> Iterator[tuple[Path, str]]:
        """Errors a schema cannot find: (relative path, message)."""
        return iter(())

    def steps_needed(self, spec: Mapping[str, Any]) -> int:
        """What one instance of this step (as a child) counts against `max_steps`."""
        return 1

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        raise NotImplementedError(f"{self.name} cannot be a top-level step")

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        raise NotImplementedError(f"{self.name} cannot be a top-level step")

    async def run(self, attempt: Attempt) -> Any:
        raise StepError(f"a {self.name} step does not run on a worker")


class Executable(StepType):
    """A step a worker runs (one job per attempt): created queued, its job in the same
    transaction; handed back `pending` while its run was paused, queued again after."""

    async def create(self, tick: Tick, new: NewStep) -> Progress:
        if await tick.charge(new.spec, 1):
            await tick.enqueue([await tick.insert(new)])
        return False

    async def advance(self, tick: Tick, spec: dict[str, Any], row: Row) -> Progress:
        if row["status"] == "pending":
            await tick.requeue(row["id"])
        return False


class StepTypes:
    """The registry: type name → step type. Registering a name twice is an error."""

    def __init__(self, types: Iterable[StepType] = ()) -> None:
        self._types: dict[str, StepType] = {}
        for t in types:
            self.register(t)

    def register(self, step_type: StepType) -> None:
        if not step_type.name or step_type.name in self._types:
            raise ValueError(f"step type {step_type.name!r} is unnamed or registered twice")
        self._types[step_type.name] = step_type

    def __getitem__(self, name: str) -> StepType:
        return self._types[name]

    def __iter__(self) -> Iterator[StepType]:
        return iter(self._types.values())

    def names(self) -> list[str]:
        return list(self._types)
