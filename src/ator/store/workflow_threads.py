"""Agent steps' hidden threads and a run's money (layer: store; imports sqlalchemy,
ator.store.*).

Each `agent` step runs its turns on one thread of its own, bound here once per step
(`bind`: a retried attempt finds the same thread, so its resend of the same client
message id follows the turn the first attempt started instead of paying again). A run's
settled spend is its threads' turns' `cost_usd` (what every model call's step write
settles), read live so a turn in flight counts its finished calls.

`TURN_SQL` is the per-turn field a turn of such a thread carries (its run and the run's
usd budget), read in the turn's start statement over `t` (the thread).
"""

from __future__ import annotations

from decimal import Decimal
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["TURN_SQL", "bind", "run_spend", "thread_of"]

TURN_SQL = """(SELECT jsonb_build_object('run_id', w.run_id, 'usd', r.usd_budget,
                                  'step_id', w.step_id)
   FROM workflow_threads w JOIN workflow_runs r ON r.id = w.run_id
  WHERE w.thread_id = t.id)"""

_OF = sa.text("SELECT thread_id FROM workflow_threads WHERE step_id = :step_id "
              "AND org_id = :org_id")

_BIND = sa.text("""
INSERT INTO workflow_threads (step_id, run_id, org_id, thread_id)
VALUES (:step_id, :run_id, :org_id, :thread_id)
ON CONFLICT (step_id) DO NOTHING RETURNING thread_id
""")

_SPEND = sa.text("""
SELECT COALESCE(sum(tu.cost_usd), 0) AS usd
  FROM workflow_threads w JOIN turns tu ON tu.thread_id = w.thread_id
 WHERE w.run_id = :run_id AND w.org_id = :org_id AND tu.org_id = :org_id
""")


async def thread_of(db: Database, scope: Scope, step_id: UUID) -> UUID | None:
    rows = await db.read(_OF, {"step_id": step_id, "org_id": scope.org_id})
    return UUID(str(rows[0]["thread_id"])) if rows else None


async def bind(db: Database, scope: Scope, step_id: UUID, run_id: UUID,
               thread_id: UUID) -> UUID:
    """Bind `thread_id` to the step unless another attempt bound one first; returns the
    step's thread (the first bound)."""
    rows = await db.write(_BIND, {"step_id": step_id, "run_id": run_id,
                                  "org_id": scope.org_id, "thread_id": thread_id})
    if rows:
        return thread_id
    found = await thread_of(db, scope, step_id)
    assert found is not None
    return found


async def run_spend(db: Database, scope: Scope, run_id: UUID) -> Decimal:
    """What the run's agent turns have settled so far (calls in flight not included)."""
    rows = await db.read(_SPEND, {"run_id": run_id, "org_id": scope.org_id})
    return Decimal(rows[0]["usd"])
