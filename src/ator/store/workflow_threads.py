"""Agent steps' hidden threads and a run's money (layer: store; imports sqlalchemy,
ator.store.*).

Each `agent` step runs its turns on one thread of its own, bound here once per step
(`bind`: a retried attempt finds the same thread, so its resend of the same client
message id follows the turn the first attempt started instead of paying again). A run's
settled spend is its threads' turns' `cost_usd` (what every model call's step write
settles), read live in `hold` so a turn in flight counts its finished calls.

Concurrent agent steps of one run (a `map`) reserve before each call (`hold`): under a
transaction lock on the run, the call goes ahead only if the settled spend, what the run's
other running turns hold for the calls they are making, and this call's worst case fit the
budget, and then it holds its worst case (a `workflow_holds` row per turn, replaced at its
next call). A hold counts while its turn runs and has not recorded the call (its cost is
still what it was when it held): the step write that settles the call, the turn's end, or
its loss release it with no statement of its own and nothing to sweep. The lock is taken
in a statement of its own before the check, so the check's snapshot sees every hold that
was committed before it got the lock.

`TURN_SQL` is the per-turn field a turn of such a thread carries (its run and the run's
usd budget), read in the turn's start statement over `t` (the thread).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Database
from ator.store.scope import Scope

__all__ = ["TURN_SQL", "Hold", "bind", "hold", "thread_of"]

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


_RUN_LOCK = sa.text("SELECT pg_advisory_xact_lock(hashtextextended(CAST(:run_id AS text), 24))")

_HOLD = sa.text("""
WITH spent AS (
  SELECT COALESCE(sum(tu.cost_usd), 0) AS usd
    FROM workflow_threads w JOIN turns tu ON tu.thread_id = w.thread_id
   WHERE w.run_id = :run_id AND w.org_id = :org_id AND tu.org_id = :org_id
), held AS (
  SELECT COALESCE(sum(h.amount_usd), 0) AS usd
    FROM workflow_holds h JOIN turns tu ON tu.id = h.turn_id
   WHERE h.run_id = :run_id AND h.turn_id <> :turn_id
     AND tu.status = 'running' AND tu.cost_usd = h.cost_at
), put AS (
  INSERT INTO workflow_holds (turn_id, run_id, org_id, amount_usd, cost_at)
  SELECT tu.id, :run_id, :org_id, :amount, tu.cost_usd FROM turns tu, spent, held
   WHERE tu.id = :turn_id AND tu.org_id = :org_id
     AND spent.usd + held.usd + CAST(:amount AS numeric) <= CAST(:budget AS numeric)
  ON CONFLICT (turn_id) DO UPDATE SET amount_usd = excluded.amount_usd,
                                      cost_at = excluded.cost_at
  RETURNING 1
)
SELECT spent.usd AS spent, held.usd AS held, (SELECT count(*) FROM put) AS held_now
  FROM spent, held
""")


@dataclass(frozen=True, slots=True)
class Hold:
    """What a hold found: the run's settled spend, what its other turns hold, and whether
    this call's worst case fit and is now held."""

    spent: Decimal
    held: Decimal
    ok: bool


async def hold(db: Database, scope: Scope, run_id: UUID, turn_id: UUID, amount: Decimal,
               budget: Decimal) -> Hold:
    """Hold `amount` of the run's `budget` for the turn's next call if it fits (module
    docstring); a lock statement and the check, in one transaction."""
    params = {"run_id": run_id, "org_id": scope.org_id, "turn_id": turn_id,
              "amount": amount, "budget": budget}
    async with db.begin() as conn:
        await conn.execute(_RUN_LOCK, {"run_id": str(run_id)})
        row = (await conn.execute(_HOLD, params)).one()
    return Hold(Decimal(row["spent"]), Decimal(row["held"]), bool(row["held_now"]))
