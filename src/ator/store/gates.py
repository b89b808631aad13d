"""Human gates of workflow runs (layer: store; imports sqlalchemy, ator.jsonenc,
ator.store.*).

A `human` step opens a gate in the reconciler's tick: its pending action (kind `gate`,
store/approvals.py: the one decide-once row, its audit) and its expiry job are written in
that tick's transaction (`open_gate`), and the run goes `waiting` (`paused_at`: since
when). The decision path (engine/approvals.py) claims the action; `end_wait` then puts the
run back to `running` with its deadline moved by the time it waited (the wall clock
excludes a gate's wait), bumps `changes` and is followed by a wake of the reconciler in the
same transaction; the reconciler reads the decided action (`action`) and finishes the step.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.approvals import Action, action_of
from ator.store.database import Connection
from ator.store.jobs import CHANNEL

__all__ = ["GATE_KIND", "action", "end_wait", "open_gate", "reopen_step"]

GATE_KIND = "gate"

_OPEN = sa.text(f"""
WITH _pa AS (
  INSERT INTO pending_actions (id, org_id, kind, thread_id, turn_id, tool_use_id, name,
                               arguments, subject, expires_at)
  VALUES (:id, :org_id, '{GATE_KIND}', NULL, NULL, NULL, :name, '{{}}'::jsonb,
          CAST(:subject AS jsonb),
          now() + make_interval(secs => CAST(:expire AS double precision)))
  RETURNING *
), _job AS (
  INSERT INTO jobs (org_id, kind, payload, max_attempts, run_at)
  SELECT org_id, :job_kind, jsonb_build_object('action_id', id), :attempts, expires_at
    FROM _pa WHERE expires_at IS NOT NULL
  RETURNING id
), _run AS (
  UPDATE workflow_runs SET status = 'waiting', paused_at = now()
   WHERE id = :run_id AND status = 'running' AND lease_owner = :owner
  RETURNING id
)
SELECT _pa.*, (SELECT count(pg_notify('{CHANNEL}', '')) FROM _job) AS jobs,
       (SELECT count(*) FROM _run) AS waiting FROM _pa
""")


async def open_gate(conn: Connection, *, action_id: UUID, org_id: UUID, run_id: UUID,
                    owner: str, name: str, subject: dict[str, Any], expire_after: float | None,
                    job_kind: str, attempts: int) -> Action:
    """The gate's pending action and expiry job, and the run `waiting` (in the tick)."""
    row = (await conn.execute(_OPEN, {
        "id": action_id, "org_id": org_id, "run_id": run_id, "owner": owner, "name": name,
        "subject": jsonenc.dumps(subject), "expire": expire_after, "job_kind": job_kind,
        "attempts": attempts})).one()
    return action_of(row)


_GET = sa.text("SELECT * FROM pending_actions WHERE id = :id AND org_id = :org_id")


async def action(conn: Connection, org_id: UUID, action_id: UUID) -> Action | None:
    row = (await conn.execute(_GET, {"id": action_id, "org_id": org_id})).first()
    return action_of(row) if row is not None else None


# Back to running: the deadline moves by the wait (as a resume's does by the pause).
_END_WAIT = sa.text("""
UPDATE workflow_runs SET status = 'running', deadline = deadline + (now() - paused_at),
       paused_at = NULL
 WHERE id = :id AND org_id = :org_id AND status = 'waiting' RETURNING id
""")


async def end_wait(conn: Connection, org_id: UUID, run_id: UUID) -> bool:
    """The run waiting on its gate goes on (False: it was not waiting: cancelled, say)."""
    return (await conn.execute(_END_WAIT, {"id": run_id, "org_id": org_id})).first() is not None


_REOPEN = sa.text("""
UPDATE workflow_steps SET status = 'waiting', input = CAST(:input AS jsonb), error = NULL,
       error_code = NULL, finished_at = NULL
 WHERE id = :id AND status = 'pending' RETURNING id
""")


async def reopen_step(conn: Connection, step_id: UUID, input: dict[str, Any]) -> bool:
    """A gate step handed back by a resume (`pending`) waits on a new gate."""
    return (await conn.execute(_REOPEN, {"id": step_id,
                                         "input": jsonenc.dumps(input)})).first() is not None
