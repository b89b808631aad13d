"""Workflow statements: recipes, versions, runs, steps, attempts, run events (layer: store;
imports sqlalchemy, asyncpg, ator.errors, ator.store.*).

Every statement takes the org (another org's row is not found). The invariants live in the
statements themselves:

- a version is written by the statement that bumps `workflows.latest_version`, so two
  publishes never get the same number, and a version row is never updated;
- a start is `INSERT … ON CONFLICT (org_id, idempotency_key) DO NOTHING`: a racing second
  start waits for the first's commit, inserts nothing, and reads the first's run;
- lifecycle transitions are conditional (`WHERE status IN (…)`), so nothing reopens a
  terminal run, and each writes its own reason column;
- the reconciler's writes are fenced by its lease (`lease_owner = :owner`) and take the run
  row's lock; a step's completion bumps `changes` on that same row *before* it enqueues the
  reconcile job, so either the reconciler sees the change before it lets go or the
  completion's enqueue runs after it let go (see workflows/reconciler.py);
- a step's output is written only `WHERE output IS NULL AND attempt = :attempt`, and an
  attempt row is unique per (step, attempt).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import sqlalchemy as sa

from ator.errors import Conflict
from ator.store import run_origins, subruns
from ator.store import webhook_outbox as webhooks
from ator.store.database import Connection, Database, Row
from ator.store.scope import Scope

__all__ = [
    "ENDED",
    "EVENT_PARTS",
    "PREVIEW_BYTES",
    "PROGRESS",
    "NewRun",
    "RunFence",
    "preview",
]

PREVIEW_BYTES = 2048
TERMINAL = ("succeeded", "failed", "cancelled")
#: The events that end a run: each tells its origin, wakes its parent and writes its
#: `run.ended` webhook (`add_event`). This is the one run-end mechanism: every writer that
#: ends a run appends one of these, in the transaction that ends it.
ENDED = frozenset({"run_succeeded", "run_failed", "run_cancelled"})
#: Events that count as progress (the no-progress close measures from the last one).
PROGRESS = frozenset({"run_started", "run_resumed", "step_done", "step_failed"})


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def preview(text: str) -> str:
    """The first PREVIEW_BYTES bytes of `text`, cut at a character boundary."""
    raw = text.encode()
    if len(raw) <= PREVIEW_BYTES:
        return text
    return raw[:PREVIEW_BYTES].decode(errors="ignore")


# Workflows and versions --------------------------------------------------------------

_CREATE = sa.text("""
INSERT INTO workflows (id, org_id, name) VALUES (:id, :org_id, :name)
ON CONFLICT (org_id, name) DO NOTHING
RETURNING id, org_id, name, latest_version, created_at
""")

_WORKFLOW_COLS = "id, org_id, name, latest_version, created_at"

_GET_WORKFLOW = sa.text(f"SELECT {_WORKFLOW_COLS} FROM workflows "
                        "WHERE id = :id AND org_id = :org_id")

_LIST_WORKFLOWS = sa.text(f"SELECT {_WORKFLOW_COLS} FROM workflows WHERE org_id = :org_id "
                          "ORDER BY name LIMIT :limit")

_PUBLISH = sa.text("""
WITH w AS (
  UPDATE workflows SET latest_version = latest_version + 1
   WHERE id = :workflow_id AND org_id = :org_id
  RETURNING id, latest_version)
INSERT INTO workflow_versions (workflow_id, version, org_id, recipe, sha256, published_by)
SELECT w.id, w.latest_version, :org_id, CAST(:recipe AS jsonb), :sha256, :user_id FROM w
RETURNING workflow_id, version, sha256, published_by, published_at
""")

_VERSION_COLS = "workflow_id, version, recipe, sha256, published_by, published_at"

_GET_VERSION = sa.text(f"""
SELECT {_VERSION_COLS} FROM workflow_versions
 WHERE workflow_id = :workflow_id AND org_id = :org_id
   AND version = COALESCE(CAST(:version AS int),
                          (SELECT latest_version FROM workflows
                            WHERE id = :workflow_id AND org_id = :org_id))
""")

_LIST_VERSIONS = sa.text("""
SELECT workflow_id, version, sha256, published_by, published_at FROM workflow_versions
 WHERE workflow_id = :workflow_id AND org_id = :org_id ORDER BY version DESC LIMIT :limit
""")


async def create_workflow(db: Database, scope: Scope, name: str) -> Row:
    """A new (empty) workflow. Raises Conflict when the org has one of that name."""
    rows = await db.write(_CREATE, {"id": uuid4(), "org_id": scope.org_id, "name": name})
    if not rows:
        raise Conflict(f"a workflow named {name!r} exists", code="workflow_exists")
    return rows[0]


async def get_workflow(db: Database, scope: Scope, workflow_id: UUID) -> Row | None:
    rows = await db.read(_GET_WORKFLOW, {"id": workflow_id, "org_id": scope.org_id})
    return rows[0] if rows else None


async def list_workflows(db: Database, scope: Scope, limit: int) -> list[Row]:
    return await db.read(_LIST_WORKFLOWS, {"org_id": scope.org_id, "limit": limit})


async def publish(db: Database, scope: Scope, workflow_id: UUID, recipe: dict[str, Any],
                  sha256: str) -> Row | None:
    """Write the next version (None: no such workflow in the org)."""
    rows = await db.write(_PUBLISH, {"workflow_id": workflow_id, "org_id": scope.org_id,
                                     "recipe": dumps(recipe), "sha256": sha256,
                                     "user_id": scope.user_id})
    return rows[0] if rows else None


async def get_version(db: Database, scope: Scope, workflow_id: UUID,
                      version: int | None) -> Row | None:
    """A version (the latest when `version` is None)."""
    rows = await db.read(_GET_VERSION, {"workflow_id": workflow_id, "org_id": scope.org_id,
                                        "version": version})
    return rows[0] if rows else None


async def list_versions(db: Database, scope: Scope, workflow_id: UUID, limit: int) -> list[Row]:
    return await db.read(_LIST_VERSIONS, {"workflow_id": workflow_id, "org_id": scope.org_id,
                                          "limit": limit})


# Runs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewRun:
    workflow_id: UUID
    version: int
    recipe: dict[str, Any]
    input: Any
    idempotency_key: str | None
    max_steps: int
    wall_clock_s: float
    usd_budget: Decimal | None = None
    idle_s: float | None = None


_RUN_COLS = ("id, org_id, workflow_id, version, input, idempotency_key, status, output, "
             "fail_reason, pause_reason, cancel_reason, error, max_steps, steps_used, "
             "wall_clock_s, deadline, paused_at, event_seq, created_by, created_at, "
             "finished_at, usd_budget, spent_usd, idle_s, progress_at")

_START = sa.text(f"""
INSERT INTO workflow_runs (id, org_id, workflow_id, version, recipe, input, idempotency_key,
                           max_steps, wall_clock_s, deadline, created_by, usd_budget, idle_s)
VALUES (:id, :org_id, :workflow_id, :version, CAST(:recipe AS jsonb), CAST(:input AS jsonb),
        :key, :max_steps, :wall_clock_s, now() + make_interval(secs => :wall_clock_s),
        :user_id, :usd_budget, :idle_s)
ON CONFLICT (org_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING {_RUN_COLS}
""")

_BY_KEY = sa.text(f"SELECT {_RUN_COLS} FROM workflow_runs "
                  "WHERE org_id = :org_id AND idempotency_key = :key")

_GET_RUN = sa.text(f"SELECT {_RUN_COLS} FROM workflow_runs WHERE id = :id AND org_id = :org_id")

_LIST_RUNS = sa.text(f"""
SELECT {_RUN_COLS} FROM workflow_runs
 WHERE org_id = :org_id
   AND (CAST(:workflow_id AS uuid) IS NULL OR workflow_id = :workflow_id)
   AND (CAST(:before_at AS timestamptz) IS NULL
        OR (created_at, id) < (CAST(:before_at AS timestamptz), CAST(:before_id AS uuid)))
 ORDER BY created_at DESC, id DESC LIMIT :limit
""")

# One statement: the next seq of the run (and, for what the reconciler must look at, a bump
# of `changes`), and the event.
#: The event append as CTE parts over a run id expression `{run}` (a parameter, or a
#: column of an earlier CTE): `_r` bumps the run's seq (and `changes`, and the no-progress
#: clock), `_e` inserts the event. A statement that also writes what the event reports
#: appends both in the same round trip (store/workflow_steps.py's completion).
EVENT_PARTS = """
_r AS (
  UPDATE workflow_runs SET event_seq = event_seq + 1, changes = changes + :bump,
         progress_at = CASE WHEN :progress THEN now() ELSE progress_at END
   WHERE id = {run} RETURNING id, org_id, event_seq),
_e AS (
  INSERT INTO workflow_events (run_id, seq, org_id, kind, data)
  SELECT _r.id, _r.event_seq, _r.org_id, :kind, CAST(:data AS jsonb) FROM _r
  RETURNING seq)"""

_EVENT = sa.text("WITH " + EVENT_PARTS.format(run=":run_id") + "\nSELECT seq FROM _e")

_EVENTS = sa.text("""
SELECT seq, kind, data, created_at FROM workflow_events
 WHERE run_id = :run_id AND org_id = :org_id AND seq > :after ORDER BY seq LIMIT :limit
""")


async def start_run(conn: Connection, scope: Scope, run: NewRun) -> tuple[Row, bool]:
    """Insert a run, or find the org's run of the same idempotency key: (row, created)."""
    params = {"id": uuid4(), "org_id": scope.org_id, "workflow_id": run.workflow_id,
              "version": run.version, "recipe": dumps(run.recipe), "input": dumps(run.input),
              "key": run.idempotency_key, "max_steps": run.max_steps,
              "wall_clock_s": run.wall_clock_s, "user_id": scope.user_id,
              "usd_budget": run.usd_budget, "idle_s": run.idle_s}
    made = (await conn.execute(_START, params)).first()
    if made is not None:
        return made, True
    return (await conn.execute(_BY_KEY, {"org_id": scope.org_id,
                                         "key": run.idempotency_key})).one(), False


async def get_run(db: Database, scope: Scope, run_id: UUID) -> Row | None:
    rows = await db.read(_GET_RUN, {"id": run_id, "org_id": scope.org_id})
    return rows[0] if rows else None


async def list_runs(db: Database, scope: Scope, *, workflow_id: UUID | None,
                    before: tuple[datetime, UUID] | None, limit: int) -> list[Row]:
    return await db.read(_LIST_RUNS, {
        "org_id": scope.org_id, "workflow_id": workflow_id, "limit": limit,
        "before_at": before[0] if before else None, "before_id": before[1] if before else None})


async def add_event(conn: Connection, run_id: UUID, kind: str, data: dict[str, Any], *,
                    bump: bool) -> int:
    """Append to the run's event log; `bump` also tells the reconciler something changed.
    The event that ends a run also queues the telling of the thread that started it
    (store/run_origins.py) and writes its `run.ended` webhook (store/webhooks.py), in the
    same transaction, whichever writer ends it. A step's end (or a start or resume) restarts
    the run's no-progress clock."""
    seq = int((await conn.execute(_EVENT, {"run_id": run_id, "kind": kind, "data": dumps(data),
                                           "bump": 1 if bump else 0,
                                           "progress": kind in PROGRESS})).one()["seq"])
    if kind in ENDED:
        await run_origins.ended(conn, run_id)
        await subruns.ended(conn, run_id)
        await webhooks.run_ended(conn, run_id, kind, data)
    return seq


async def events(db: Database, scope: Scope, run_id: UUID, *, after: int,
                 limit: int) -> list[Row]:
    return await db.read(_EVENTS, {"run_id": run_id, "org_id": scope.org_id, "after": after,
                                   "limit": limit})


# Lifecycle (conditional: a terminal run stays terminal) --------------------------------

_PAUSE = sa.text(f"""
UPDATE workflow_runs SET status = 'paused', pause_reason = :reason, paused_at = now()
 WHERE id = :id AND org_id = :org_id AND status = 'running' RETURNING {_RUN_COLS}
""")

# Time paused does not count against the wall clock: the deadline moves by it.
_RESUME = sa.text(f"""
UPDATE workflow_runs SET status = 'running', pause_reason = NULL,
       deadline = deadline + (now() - paused_at), paused_at = NULL
 WHERE id = :id AND org_id = :org_id AND status = 'paused' RETURNING {_RUN_COLS}
""")

# A resumed run restarts from its failed steps (and the expanders above them).
_RETRY_FAILED = sa.text("""
UPDATE workflow_steps SET status = 'pending', error = NULL
 WHERE run_id = :run_id AND status = 'failed'
""")

_CANCEL = sa.text(f"""
UPDATE workflow_runs SET status = 'cancelled', cancel_reason = :reason, finished_at = now(),
       paused_at = NULL
 WHERE id = :id AND org_id = :org_id AND status IN ('running','paused','waiting')
RETURNING {_RUN_COLS}
""")

# The reconciler's own ends; fenced by its lease.
_FINISH = sa.text(f"""
UPDATE workflow_runs SET status = :status, output = CAST(:output AS jsonb),
       fail_reason = :fail_reason, error = :error,
       finished_at = CASE WHEN :status IN ('succeeded','failed') THEN now() END
 WHERE id = :id AND status = 'running' AND lease_owner = :owner RETURNING {_RUN_COLS}
""")

_PAUSE_BY_RECONCILER = sa.text(f"""
UPDATE workflow_runs SET status = 'paused', pause_reason = :reason, paused_at = now(),
       error = :error
 WHERE id = :id AND status = 'running' AND lease_owner = :owner RETURNING {_RUN_COLS}
""")


async def pause(conn: Connection, scope: Scope, run_id: UUID, reason: str) -> Row | None:
    return (await conn.execute(_PAUSE, {"id": run_id, "org_id": scope.org_id,
                                        "reason": reason})).first()


async def resume(conn: Connection, scope: Scope, run_id: UUID) -> Row | None:
    row = (await conn.execute(_RESUME, {"id": run_id, "org_id": scope.org_id})).first()
    if row is not None:
        await conn.execute(_RETRY_FAILED, {"run_id": run_id})
    return row


async def cancel(conn: Connection, scope: Scope, run_id: UUID, reason: str) -> Row | None:
    return (await conn.execute(_CANCEL, {"id": run_id, "org_id": scope.org_id,
                                         "reason": reason})).first()


async def finish(conn: Connection, run_id: UUID, owner: str, *, status: str,
                 output: Any = None, fail_reason: str | None = None,
                 error: str | None = None) -> bool:
    row = (await conn.execute(_FINISH, {
        "id": run_id, "owner": owner, "status": status,
        "output": None if output is None else dumps(output), "fail_reason": fail_reason,
        "error": error})).first()
    return row is not None


async def pause_failed(conn: Connection, run_id: UUID, owner: str, *, reason: str,
                       error: str | None) -> bool:
    row = (await conn.execute(_PAUSE_BY_RECONCILER, {"id": run_id, "owner": owner,
                                                     "reason": reason, "error": error})).first()
    return row is not None


# The reconciler's lease -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunFence:
    """The run as its lease holder sees it, at the start of a transaction."""

    id: UUID
    org_id: UUID
    status: str
    recipe: dict[str, Any]
    input: Any
    overdue: bool
    deadline: datetime
    max_steps: int
    steps_used: int
    changes: int
    paused_at: datetime | None
    pause_expired: bool
    idle: bool = False  # no progress for the run's idle_s
    idle_at: datetime | None = None  # when it would be, with no progress till then


_TAKE = sa.text("""
UPDATE workflow_runs SET lease_owner = :owner, lease_until = now() + make_interval(secs => :ttl)
 WHERE id = :id AND org_id = :org_id
   AND (lease_owner IS NULL OR lease_owner = :owner OR lease_until < now())
RETURNING id
""")

_LEASE_LEFT = sa.text("""
SELECT GREATEST(0, EXTRACT(EPOCH FROM lease_until - now()))::float AS left
  FROM workflow_runs WHERE id = :id AND org_id = :org_id
""")

_FENCE = sa.text("""
UPDATE workflow_runs SET lease_until = now() + make_interval(secs => :ttl)
 WHERE id = :id AND lease_owner = :owner
RETURNING id, org_id, status, recipe, input, deadline < now() AS overdue, deadline,
          max_steps, steps_used, changes, paused_at,
          paused_at < now() - make_interval(secs => :pause_ttl) AS pause_expired,
          COALESCE(progress_at < now() - make_interval(secs => idle_s), false)
            AND NOT EXISTS (SELECT 1 FROM workflow_steps w
                             WHERE w.run_id = workflow_runs.id AND w.status = 'waiting')
            AS idle,
          CASE WHEN idle_s IS NOT NULL
               THEN progress_at + make_interval(secs => idle_s) END AS idle_at
""")

_EXPIRE_PAUSE = sa.text(f"""
UPDATE workflow_runs SET status = 'cancelled', cancel_reason = 'pause_expired',
       finished_at = now(), paused_at = NULL
 WHERE id = :id AND status = 'paused' AND lease_owner = :owner RETURNING {_RUN_COLS}
""")

_RENEW = sa.text("""
UPDATE workflow_runs SET lease_until = now() + make_interval(secs => :ttl)
 WHERE id = :id AND lease_owner = :owner RETURNING id
""")

_RELEASE = sa.text("""
UPDATE workflow_runs SET lease_owner = NULL, lease_until = NULL
 WHERE id = :id AND lease_owner = :owner RETURNING changes, status
""")

# FOR NO KEY UPDATE (an UPDATE's own lock): the run's events, holds and thread binds insert
# under their foreign key's share lock meanwhile, which FOR UPDATE would block.
_CHANGES = sa.text("SELECT changes FROM workflow_runs WHERE id = :id AND lease_owner = :owner "
                   "FOR NO KEY UPDATE")


async def take_lease(db: Database, scope: Scope, run_id: UUID, owner: str,
                     ttl: float) -> float | None:
    """Take the run's lease: None when taken, else the seconds left on another's lease
    (-1.0 when the run does not exist)."""
    if await db.write(_TAKE, {"id": run_id, "org_id": scope.org_id, "owner": owner, "ttl": ttl}):
        return None
    rows = await db.read(_LEASE_LEFT, {"id": run_id, "org_id": scope.org_id})
    return float(rows[0]["left"] or 0.0) if rows else -1.0


async def renew_lease(db: Database, run_id: UUID, owner: str, ttl: float) -> bool:
    return bool(await db.write(_RENEW, {"id": run_id, "owner": owner, "ttl": ttl}))


async def fence(conn: Connection, run_id: UUID, owner: str, ttl: float,
                pause_ttl: float) -> RunFence | None:
    """Renew the lease, lock the run row and read it (None: the lease is not ours)."""
    row = (await conn.execute(_FENCE, {"id": run_id, "owner": owner, "ttl": ttl,
                                       "pause_ttl": pause_ttl})).first()
    if row is None:
        return None
    return RunFence(row.id, row.org_id, row.status, row.recipe, row.input, row.overdue,
                    row.deadline, row.max_steps, row.steps_used, row.changes, row.paused_at,
                    bool(row.pause_expired), bool(row.idle), row.idle_at)


async def expire_pause(conn: Connection, run_id: UUID, owner: str) -> bool:
    """Cancel a run paused past its time (fenced by the reconciler's lease)."""
    return (await conn.execute(_EXPIRE_PAUSE, {"id": run_id, "owner": owner})).first() is not None


async def changes_locked(conn: Connection, run_id: UUID, owner: str) -> int | None:
    """The run's change counter, under its row lock (None: the lease is not ours)."""
    row = (await conn.execute(_CHANGES, {"id": run_id, "owner": owner})).first()
    return None if row is None else int(row["changes"])


async def release_lease(conn: Connection, run_id: UUID, owner: str) -> None:
    await conn.execute(_RELEASE, {"id": run_id, "owner": owner})
