"""Sub-runs: a run started by a `workflow` step of another run (layer: store; imports
sqlalchemy, ator.jsonenc, ator.store.*).

The child is inserted in its parent's reconciler tick (`start_child`: parent run, parent
step, depth), so a step has exactly one child. When the child ends (`ended`, called by the
statement that logs its end event) the parent's `changes` is bumped and its reconciler
queued, in that same transaction; the parent's tick then finishes the step with the
child's output and rolls its spend up (`roll_up`) in the transaction that finishes the
step: once. Pause, resume and cancel of a run reach its open descendants (`descendants`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.jsonenc import dumps
from ator.store import jobs as job_store
from ator.store.database import Connection, Row
from ator.store.jobs import NewJob
from ator.store.scope import Scope

__all__ = ["RECONCILE_KIND", "child", "depth", "descendants", "ended", "lock_tree", "roll_up",
           "start_child"]

# The workflows' reconcile job kind (workflows/kinds.py `RECONCILE`), and its unique key.
RECONCILE_KIND = "workflow.reconcile"

_START = sa.text("""
INSERT INTO workflow_runs (id, org_id, workflow_id, version, recipe, input, max_steps,
                           wall_clock_s, deadline, created_by, usd_budget, idle_s,
                           parent_run_id, parent_step_id, depth)
VALUES (:id, :org_id, :workflow_id, :version, CAST(:recipe AS jsonb), CAST(:input AS jsonb),
        :max_steps, :wall_clock_s, now() + make_interval(secs => :wall_clock_s), NULL,
        :usd_budget, :idle_s, :parent_run_id, :parent_step_id, :depth)
RETURNING id
""")


async def start_child(conn: Connection, scope: Scope, run_id: UUID, *, workflow_id: UUID,
                      version: int,
                      recipe: dict[str, Any], input: Any, max_steps: int,
                      wall_clock_s: float, usd_budget: Decimal | None, idle_s: float | None,
                      parent_run_id: UUID, parent_step_id: UUID, depth: int) -> UUID:
    row = (await conn.execute(_START, {
        "id": run_id, "org_id": scope.org_id, "workflow_id": workflow_id, "version": version,
        "recipe": dumps(recipe), "input": dumps(input), "max_steps": max_steps,
        "wall_clock_s": wall_clock_s, "usd_budget": usd_budget, "idle_s": idle_s,
        "parent_run_id": parent_run_id, "parent_step_id": parent_step_id,
        "depth": depth})).one()
    return UUID(str(row["id"]))


_DEPTH = sa.text("SELECT depth FROM workflow_runs WHERE id = :id")


async def depth(conn: Connection, run_id: UUID) -> int:
    row = (await conn.execute(_DEPTH, {"id": run_id})).first()
    return int(row["depth"]) if row is not None else 0


_CHILD = sa.text("""
SELECT id, status, output, fail_reason, cancel_reason, error, spent_usd FROM workflow_runs
 WHERE id = :id AND org_id = :org_id
""")


async def child(conn: Connection, org_id: UUID, run_id: UUID) -> Row | None:
    return (await conn.execute(_CHILD, {"id": run_id, "org_id": org_id})).first()


# Once per step: the step's input is marked `rolled` by the same statement.
_ROLL_UP = sa.text("""
WITH s AS (UPDATE workflow_steps SET cost_usd = cost_usd + :usd,
                  input = COALESCE(input, '{}'::jsonb) || jsonb_build_object('rolled', true)
            WHERE id = :step_id AND (input ->> 'rolled') IS NULL
           RETURNING run_id)
UPDATE workflow_runs r SET spent_usd = r.spent_usd + :usd FROM s WHERE r.id = s.run_id
RETURNING r.id
""")


async def roll_up(conn: Connection, step_id: UUID, usd: Decimal) -> None:
    """The child's spend onto the parent step and run (in the tick finishing the step)."""
    await conn.execute(_ROLL_UP, {"step_id": step_id, "usd": usd})


_PARENT = sa.text("""
UPDATE workflow_runs p SET changes = p.changes + 1
  FROM workflow_runs c WHERE c.id = :id AND p.id = c.parent_run_id
RETURNING p.id, p.org_id
""")


async def ended(conn: Connection, run_id: UUID) -> None:
    """A run ended: wake its parent's reconciler (if it has a parent), in the caller's
    transaction (the bump first: a reconciler at work sees it and ticks again)."""
    row = (await conn.execute(_PARENT, {"id": run_id})).first()
    if row is None:
        return
    await job_store.enqueue(conn, Scope(row["org_id"]), NewJob(
        kind=RECONCILE_KIND, payload={"run_id": str(row["id"])}, max_attempts=100,
        priority=1, unique_key=f"run:{row['id']}"))


_DESCENDANTS = sa.text("""
WITH RECURSIVE d AS (
  SELECT id, status FROM workflow_runs WHERE parent_run_id = :id AND org_id = :org_id
  UNION ALL
  SELECT r.id, r.status FROM workflow_runs r JOIN d ON r.parent_run_id = d.id
)
SELECT id FROM d WHERE status IN ('running','paused','waiting')
""")


# The run and every sub-run below it, locked deepest first (then by id): the order a sub-run's
# own tick takes rows in (itself, then its parent when it ends or rolls its spend up), so a
# pause, resume or cancel of the tree cannot hold a parent that a child's tick waits for
# while waiting for that child.
_LOCK_TREE = sa.text("""
WITH RECURSIVE d AS (
  SELECT id, 0 AS depth FROM workflow_runs WHERE id = :id AND org_id = :org_id
  UNION ALL
  SELECT r.id, d.depth + 1 FROM workflow_runs r JOIN d ON r.parent_run_id = d.id
)
SELECT r.id FROM workflow_runs r JOIN d ON d.id = r.id
 ORDER BY d.depth DESC, r.id FOR NO KEY UPDATE OF r
""")


async def lock_tree(conn: Connection, scope: Scope, run_id: UUID) -> None:
    """Lock the run and its sub-runs at any depth, deepest first, on the caller's
    transaction (before changing several of them)."""
    await conn.execute(_LOCK_TREE, {"id": run_id, "org_id": scope.org_id})


async def descendants(conn: Connection, scope: Scope, run_id: UUID) -> list[UUID]:
    """The run's open sub-runs, at any depth."""
    rows = (await conn.execute(_DESCENDANTS, {"id": run_id, "org_id": scope.org_id})).all()
    return [UUID(str(r["id"])) for r in rows]
