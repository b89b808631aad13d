"""Workflow step statements (layer: store; imports sqlalchemy, ator.store.*).

A step row is `pending` (made by the reconciler) → `queued` (its job written in the same
transaction) → `running` (claimed by an attempt) → `done` | `failed`; `waiting` for a wait,
`skipped` for an unchosen switch branch, `cancelled` when its run ended first. Expanders
(`map`, `switch`) are `running` while their children run and take their output from them.

Exactly-once: an attempt claims a step only while the step has no output and the run is
running, and writes its output only `WHERE output IS NULL AND attempt = :attempt` (a later
attempt's claim bumps `attempt`, fencing an earlier one out); an attempt row is unique per
(step, attempt). Listing steps never reads an output: each row carries a preview (at most
2 KB stored; a list shows its first 256 characters, so a 1,000-item map lists in well under
1 MB) and the output's size, written with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import sqlalchemy as sa

from ator.store.database import Connection, Database, Row
from ator.store.scope import Scope
from ator.store.workflows import dumps, preview

__all__ = ["ClaimedStep", "NewStep", "Output", "Spent"]

# A map's list is previewed in SQL by characters: 512 characters are at most 2 KB of UTF-8.
_SQL_PREVIEW_CHARS = 512


@dataclass(frozen=True, slots=True)
class NewStep:
    run_id: UUID
    org_id: UUID
    path: str
    position: int
    type: str
    spec: dict[str, Any]
    status: str
    parent_id: UUID | None = None
    input: Any = None
    wake_at: datetime | None = None
    output: Any = None  # for a step done at creation (a switch with no branch chosen)


_INSERT = sa.text("""
INSERT INTO workflow_steps (id, run_id, org_id, parent_id, path, position, type, spec, input,
                            status, wake_at, output, output_size, preview, finished_at)
VALUES (:id, :run_id, :org_id, :parent_id, :path, :position, :type, CAST(:spec AS jsonb),
        CAST(:input AS jsonb), :status, :wake_at, CAST(:output AS jsonb),
        octet_length(CAST(:output AS text)), left(CAST(:output AS text), 512),
        CASE WHEN :status IN ('done','skipped') THEN now() END)
RETURNING id
""")

_INSERT_ITEMS = sa.text("""
INSERT INTO workflow_steps (id, run_id, org_id, parent_id, path, position, type, spec, input,
                            status)
SELECT gen_random_uuid(), :run_id, :org_id, :parent_id, :path || '/' || (t.ord - 1),
       t.ord - 1, :type, CAST(:spec AS jsonb),
       jsonb_build_object('item', t.item, 'index', t.ord - 1), 'pending'
  FROM jsonb_array_elements(CAST(:items AS jsonb)) WITH ORDINALITY AS t(item, ord)
""")

_TOP = sa.text("""
SELECT id, path, position, type, status, error, error_code, wake_at, wake_at <= now() AS due
  FROM workflow_steps WHERE run_id = :run_id AND parent_id IS NULL ORDER BY position
""")

_TOP_OUTPUTS = sa.text("""
SELECT path, output FROM workflow_steps
 WHERE run_id = :run_id AND parent_id IS NULL AND status = 'done'
""")

_CHARGE = sa.text("""
UPDATE workflow_runs SET steps_used = steps_used + :n
 WHERE id = :run_id AND steps_used + :n <= max_steps RETURNING steps_used
""")

_COUNTS = sa.text("""
SELECT status, count(*) AS n, count(*) FILTER (WHERE error_code = 'budget') AS budget
  FROM workflow_steps WHERE parent_id = :parent_id GROUP BY status
""")

_QUEUE_CHILDREN = sa.text("""
UPDATE workflow_steps SET status = 'queued'
 WHERE id IN (SELECT id FROM workflow_steps WHERE parent_id = :parent_id AND status = 'pending'
               ORDER BY position LIMIT :n FOR UPDATE)
RETURNING id
""")

_SET_STATUS = sa.text("""
UPDATE workflow_steps SET status = :status,
       finished_at = CASE WHEN :status IN ('done','failed','skipped','cancelled') THEN now() END
 WHERE id = :id AND status = ANY(CAST(:was AS text[])) RETURNING id
""")

_FAIL = sa.text("""
UPDATE workflow_steps SET status = 'failed', error = :error, finished_at = now()
 WHERE id = :id AND status NOT IN ('done','skipped') RETURNING id
""")

_FINISH_MAP = sa.text(f"""
WITH agg AS (
  SELECT COALESCE(jsonb_agg(output ORDER BY position), '[]'::jsonb) AS v
    FROM workflow_steps WHERE parent_id = :id),
t AS (SELECT v, v::text AS s, octet_length(v::text) AS size FROM agg)
UPDATE workflow_steps SET
  status = CASE WHEN t.size <= :cap THEN 'done' ELSE 'failed' END,
  output = CASE WHEN t.size <= :cap THEN t.v END,
  output_size = t.size,
  preview = CASE WHEN t.size <= :cap THEN left(t.s, {_SQL_PREVIEW_CHARS}) END,
  error = CASE WHEN t.size > :cap
               THEN 'the list is ' || t.size || ' bytes, above the cap of ' || :cap END,
  finished_at = now()
  FROM t WHERE workflow_steps.id = :id RETURNING workflow_steps.status
""")

_TAKE_CHILD = sa.text("""
UPDATE workflow_steps p SET status = 'done', output = c.output, output_size = c.output_size,
       preview = c.preview, finished_at = now()
  FROM workflow_steps c
 WHERE p.id = :id AND c.parent_id = p.id AND c.status = 'done' RETURNING p.id
""")

_FINISH_WITH = sa.text("""
WITH v AS (SELECT CAST(:size AS int) AS size, CAST(:cap AS int) AS cap)
UPDATE workflow_steps SET status = CASE WHEN v.size <= v.cap THEN 'done' ELSE 'failed' END,
       output = CASE WHEN v.size <= v.cap THEN CAST(:output AS jsonb) END,
       output_size = v.size, preview = CASE WHEN v.size <= v.cap THEN CAST(:preview AS text) END,
       error = CASE WHEN v.size > v.cap
                    THEN 'the output is ' || v.size || ' bytes, above the cap of ' || v.cap END,
       finished_at = now()
  FROM v WHERE id = :id AND status NOT IN ('done','skipped','failed')
RETURNING status
""")

_CHILDREN = sa.text("""
SELECT id, path, position, type, status, input, output, error FROM workflow_steps
 WHERE parent_id = :parent_id ORDER BY position
""")

_INPUT = sa.text("SELECT input FROM workflow_steps WHERE id = :id")

_FINISH_WAIT = sa.text("""
UPDATE workflow_steps SET status = 'done', output = CAST(:output AS jsonb),
       output_size = octet_length(CAST(:output AS text)),
       preview = left(CAST(:output AS text), 512), finished_at = now()
 WHERE id = :id AND status = 'waiting' AND wake_at <= now() RETURNING id
""")


async def insert(conn: Connection, step: NewStep) -> UUID:
    out = None if step.output is None and step.status != "done" else dumps(step.output)
    row = (await conn.execute(_INSERT, {
        "id": uuid4(), "run_id": step.run_id, "org_id": step.org_id, "parent_id": step.parent_id,
        "path": step.path, "position": step.position, "type": step.type,
        "spec": dumps(step.spec), "input": None if step.input is None else dumps(step.input),
        "status": step.status, "wake_at": step.wake_at, "output": out})).one()
    return UUID(str(row["id"]))


async def insert_items(conn: Connection, *, run_id: UUID, org_id: UUID, parent_id: UUID,
                       path: str, spec: dict[str, Any], items: list[Any]) -> None:
    """A map's children, one per item (`path/index`), pending, in one statement."""
    await conn.execute(_INSERT_ITEMS, {"run_id": run_id, "org_id": org_id,
                                       "parent_id": parent_id, "path": path,
                                       "type": spec["type"], "spec": dumps(spec),
                                       "items": dumps(items)})


async def top(conn: Connection, run_id: UUID) -> list[Row]:
    return (await conn.execute(_TOP, {"run_id": run_id})).all()


async def top_outputs(target: Database | Connection, run_id: UUID) -> dict[str, Any]:
    """The outputs of the run's finished top-level steps, by step id."""
    if isinstance(target, Database):
        rows = await target.read(_TOP_OUTPUTS, {"run_id": run_id})
    else:
        rows = (await target.execute(_TOP_OUTPUTS, {"run_id": run_id})).all()
    return {r["path"]: r["output"] for r in rows}


async def charge(conn: Connection, run_id: UUID, n: int) -> bool:
    """Count `n` more steps against the run's max_steps; False (nothing counted) when they
    would exceed it."""
    return (await conn.execute(_CHARGE, {"run_id": run_id, "n": n})).first() is not None


async def counts(conn: Connection, parent_id: UUID) -> dict[str, int]:
    """Children by status; `budget` counts those that failed on a usd budget."""
    rows = (await conn.execute(_COUNTS, {"parent_id": parent_id})).all()
    found = {r["status"]: int(r["n"]) for r in rows}
    found["budget"] = sum(int(r["budget"]) for r in rows)
    return found


async def queue_children(conn: Connection, parent_id: UUID, n: int) -> list[UUID]:
    rows = (await conn.execute(_QUEUE_CHILDREN, {"parent_id": parent_id, "n": n})).all()
    return [UUID(str(r["id"])) for r in rows]


async def set_status(conn: Connection, step_id: UUID, status: str, was: list[str]) -> bool:
    return (await conn.execute(_SET_STATUS, {"id": step_id, "status": status,
                                             "was": was})).first() is not None


async def fail(conn: Connection, step_id: UUID, error: str) -> None:
    await conn.execute(_FAIL, {"id": step_id, "error": error[:4000]})


async def finish_map(conn: Connection, step_id: UUID, cap: int) -> str:
    """Gather a map's outputs into its own (in order); 'failed' when the list is over `cap`."""
    return str((await conn.execute(_FINISH_MAP, {"id": step_id, "cap": cap})).one()["status"])


async def take_child_output(conn: Connection, step_id: UUID) -> bool:
    """A switch takes its chosen branch's output once that branch is done."""
    return (await conn.execute(_TAKE_CHILD, {"id": step_id})).first() is not None


async def finish_with(conn: Connection, step_id: UUID, output: Any, cap: int) -> bool:
    """An expander's own output (False: over `cap`, and the step failed instead)."""
    text = dumps(output)
    size = len(text.encode())
    row = (await conn.execute(_FINISH_WITH, {"id": step_id, "output": text, "size": size,
                                             "cap": cap, "preview": preview(text)})).first()
    return row is not None and row["status"] == "done"


async def children(conn: Connection, parent_id: UUID) -> list[Row]:
    """An expander's children with their outputs, in order (verify, loop and tournament
    have a few; a map's are never read this way)."""
    return (await conn.execute(_CHILDREN, {"parent_id": parent_id})).all()


async def input_of(conn: Connection, step_id: UUID) -> Any:
    """A step's own input (a tournament's entrants)."""
    row = (await conn.execute(_INPUT, {"id": step_id})).one()
    return row["input"]


async def finish_wait(conn: Connection, step_id: UUID, output: Any) -> bool:
    return (await conn.execute(_FINISH_WAIT, {"id": step_id,
                                              "output": dumps(output)})).first() is not None


# An attempt ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimedStep:
    id: UUID
    run_id: UUID
    path: str
    attempt: int
    spec: dict[str, Any]
    input: Any
    run_input: Any


_CLAIM = sa.text("""
WITH s AS (
  UPDATE workflow_steps s SET status = 'running', attempt = s.attempt + 1
    FROM workflow_runs r
   WHERE s.id = ANY(CAST(:ids AS uuid[])) AND s.org_id = :org_id AND r.id = s.run_id
     AND r.status = 'running' AND s.output IS NULL AND s.status IN ('queued','running')
  RETURNING s.id, s.run_id, s.path, s.attempt, s.spec, s.input, r.input AS run_input),
a AS (
  INSERT INTO workflow_attempts (step_id, attempt, org_id, job_id)
  SELECT id, attempt, :org_id, :job_id FROM s)
SELECT * FROM s ORDER BY path
""")

_STATE = sa.text("""
SELECT s.run_id, s.status, s.output IS NOT NULL AS has_output, r.status AS run_status
  FROM workflow_steps s JOIN workflow_runs r ON r.id = s.run_id
 WHERE s.id = :id AND s.org_id = :org_id
""")

# One round trip for the hot path, for every step one job completed: the outputs (each
# fenced by its attempt, never over a stored one), the attempts' outcomes, and one
# `step_done` event per stored step, numbered in the run's seq by one bump of the run row
# (which also bumps `changes`) — the step rows first, then the run row, the order the
# reconciler's release relies on (store/workflows.py). The steps are of one run.
_COMPLETE = sa.text("""
WITH d AS (
  SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:attempts AS int[]),
                       CAST(:outputs AS text[]), CAST(:sizes AS int[]),
                       CAST(:previews AS text[])) AS d(id, attempt, output, size, preview)),
_s AS (
  UPDATE workflow_steps s SET status = 'done', output = CAST(d.output AS jsonb),
         output_size = d.size, preview = d.preview, error = NULL, error_code = NULL,
         finished_at = now()
    FROM d
   WHERE s.id = d.id AND s.attempt = d.attempt AND s.output IS NULL AND s.status = 'running'
  RETURNING s.id, s.run_id, s.path, s.attempt, s.output_size),
_a AS (
  UPDATE workflow_attempts a SET outcome = 'done', finished_at = now()
    FROM _s WHERE a.step_id = _s.id AND a.attempt = _s.attempt),
_r AS (
  UPDATE workflow_runs SET event_seq = event_seq + (SELECT count(*) FROM _s),
         changes = changes + 1, progress_at = now()
   WHERE id = (SELECT run_id FROM _s LIMIT 1) RETURNING id, org_id, event_seq),
_e AS (
  INSERT INTO workflow_events (run_id, seq, org_id, kind, data)
  SELECT _r.id, _r.event_seq - (SELECT count(*) FROM _s)
                + row_number() OVER (ORDER BY _s.path), _r.org_id, 'step_done',
         jsonb_build_object('step', _s.path, 'attempt', _s.attempt, 'size', _s.output_size)
    FROM _s CROSS JOIN _r)
SELECT id FROM _s
""")

# What an attempt spent (an agent turn's usage and cost), with its outcome and the run's sum.
_SPENT = sa.text("""
WITH s AS (
  UPDATE workflow_steps SET usage = CAST(:usage AS jsonb), cost_usd = :cost
   WHERE id = :id RETURNING run_id)
UPDATE workflow_runs r SET spent_usd = r.spent_usd + :cost FROM s WHERE r.id = s.run_id
""")

_FAIL_ATTEMPT = sa.text("""
UPDATE workflow_steps SET status = 'failed', error = :error, error_code = :code,
       finished_at = now()
 WHERE id = :id AND attempt = :attempt AND output IS NULL AND status = 'running'
RETURNING run_id
""")

_OUTCOME = sa.text("""
UPDATE workflow_attempts SET outcome = :outcome, finished_at = now()
 WHERE step_id = :id AND attempt = :attempt
""")


async def claim(db: Database, scope: Scope, step_ids: list[UUID],
                job_id: int) -> list[ClaimedStep]:
    """Start an attempt of each step, in one statement (a step is left out when it has an
    output, or its run is not running)."""
    rows = await db.write(_CLAIM, {"ids": step_ids, "org_id": scope.org_id, "job_id": job_id})
    return [ClaimedStep(r.id, r.run_id, r.path, r.attempt, r.spec, r.input, r.run_input)
            for r in rows]


async def state(conn: Connection, scope: Scope, step_id: UUID) -> Row | None:
    return (await conn.execute(_STATE, {"id": step_id, "org_id": scope.org_id})).first()


@dataclass(frozen=True, slots=True)
class Spent:
    """What an attempt consumed (an agent step's turns); nothing for most steps."""

    usage: dict[str, Any]
    cost_usd: Decimal

    def __bool__(self) -> bool:
        return bool(self.usage) or self.cost_usd > 0


async def _spent(conn: Connection, step: ClaimedStep, spent: Spent | None) -> None:
    if spent:
        await conn.execute(_SPENT, {"id": step.id, "usage": dumps(spent.usage),
                                    "cost": spent.cost_usd})


@dataclass(frozen=True, slots=True)
class Output:
    """An attempt's output as stored: the JSON text, its size and its preview."""

    step: ClaimedStep
    text: str
    spent: Spent | None = None

    @property
    def size(self) -> int:
        return len(self.text.encode())


async def complete(conn: Connection, outputs: list[Output]) -> set[UUID]:
    """Store the attempts' outputs (steps of one run), their `step_done` events and what
    they spent, in the caller's transaction, in one statement; returns the steps stored
    (one missing was fenced out by another attempt, and nothing of it was written)."""
    if not outputs:
        return set()
    rows = (await conn.execute(_COMPLETE, {
        "ids": [o.step.id for o in outputs], "attempts": [o.step.attempt for o in outputs],
        "outputs": [o.text for o in outputs], "sizes": [o.size for o in outputs],
        "previews": [preview(o.text) for o in outputs]})).all()
    stored = {UUID(str(r["id"])) for r in rows}
    for o in outputs:
        if o.step.id in stored:
            await _spent(conn, o.step, o.spent)
    return stored


async def fail_attempt(conn: Connection, step: ClaimedStep, error: str,
                       code: str | None = None, spent: Spent | None = None) -> bool:
    row = (await conn.execute(_FAIL_ATTEMPT, {"id": step.id, "attempt": step.attempt,
                                              "error": error[:4000], "code": code})).first()
    if row is not None:
        await conn.execute(_OUTCOME, {"id": step.id, "attempt": step.attempt,
                                      "outcome": "failed"})
        await _spent(conn, step, spent)
    return row is not None


# Reading (the API) ----------------------------------------------------------------------

_LIST = sa.text("""
SELECT id, parent_id, path, position, type, status, attempt, output_size,
       left(preview, 256) AS preview, error, error_code, cost_usd, wake_at, created_at,
       finished_at
  FROM workflow_steps
 WHERE run_id = :run_id AND org_id = :org_id
   AND (CAST(:after_at AS timestamptz) IS NULL
        OR (created_at, position, id) > (CAST(:after_at AS timestamptz), CAST(:after_pos AS int),
                                         CAST(:after_id AS uuid)))
 ORDER BY created_at, position, id LIMIT :limit
""")

_GET = sa.text("""
SELECT id, parent_id, path, position, type, status, attempt, output_size, preview, error,
       error_code, cost_usd, wake_at, created_at, finished_at, spec, input, output, usage
  FROM workflow_steps WHERE id = :id AND run_id = :run_id AND org_id = :org_id
""")


async def list_steps(db: Database, scope: Scope, run_id: UUID, *,
                     after: tuple[datetime, int, UUID] | None, limit: int) -> list[Row]:
    """A page of the run's steps, without outputs (a preview and the size instead)."""
    return await db.read(_LIST, {
        "run_id": run_id, "org_id": scope.org_id, "limit": limit,
        "after_at": after[0] if after else None, "after_pos": after[1] if after else None,
        "after_id": after[2] if after else None})


async def get_step(db: Database, scope: Scope, run_id: UUID, step_id: UUID) -> Row | None:
    rows = await db.read(_GET, {"id": step_id, "run_id": run_id, "org_id": scope.org_id})
    return rows[0] if rows else None
