"""The budget ledger: reserve a model call's worst case before it starts, settle it to the
real cost after, atomically across replicas (layer: store; imports sqlalchemy, ator.store.*).

The org's month usage lives in shards of `org_usage`. Shard 0, the budget row, holds
`reserved_usd` (the worst cases of calls in flight) and the spend of every call that
reserved; the other shards hold the spend of calls that did not (orgs without a limit), each
turn billing the shard its id picks, so a busy org's writes do not queue on one row. The
invariant is `spend + reserved_usd <= limit`, spend being the sum over the shards, where the
limit is `LEAST(orgs.monthly_budget_usd, orgs.budget_ceiling_usd)`. `turns.reserved_usd` is
what each turn holds, so a turn that dies can be made to give it back.

The check is exact for everything billed on the budget row (read under its lock). The other
shards only grow from turns that started while the org had no limit; a limit set during
such a turn can be overrun by at most the calls those turns have in flight.

1. `reserve`  one statement, before a call: add the worst case to the month row only if it
   fits. It is an upsert whose ON CONFLICT ... WHERE PostgreSQL evaluates on the newest row
   version after locking it, so concurrent reservations from any replica serialize on the
   row and none can pass a check another has already used up. The same statement adds the
   amount to the turn's row. Only orgs with a limit reserve; the engine skips this call
   (and its round trip) for an org without one.
2. settle     folded into the step write that records the call (store/turns.py), with the
   fragments below: `cost_usd += actual`, and `reserved_usd -= released` on both rows, the
   latter only while the turn is still running (if it was closed meanwhile, the sweep below
   has released or will release what it held; releasing twice would over-admit).
   `settle` here is the same arithmetic as a statement of its own, for tests and tools.
3. `release_closed`  the reaper's sweep: turns no longer running that still hold a
   reservation (lost, reaped, or ended by a path that did not settle) give it back, and so
   do expired reservations of work outside a turn.

Work outside a turn (an analysis; `reserve_work`, `settle_work`) reserves by the same rule
(`_reserve_sql`: one statement text, two holders): its hold is a `work_reservations` row
with an expiry instead of a running turn's `reserved_usd`, and its settle is the statement
that records its model call (no thread, no turn; its label as `purpose`) on the budget row.

Month boundary: a reservation is added to the month it was made in and released from the
month it is settled in (clamped at 0), so a call that straddles midnight on the 1st can make
the new month's figure too low by at most that one call's worst case, until its other
reservations settle. The old month's row may keep a stale `reserved_usd`; nothing reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.database import Database
from ator.store.scope import Scope

if TYPE_CHECKING:  # store/turns.py imports this module
    from ator.store.turns import ModelCallRow

__all__ = [
    "BUDGET_SHARD",
    "LIMIT_SQL",
    "SETTLE_TURN_SET",
    "SETTLE_USAGE_SET",
    "TURN_SHARD",
    "Released",
    "Reservation",
    "release_closed",
    "reserve",
    "reserve_work",
    "settle",
    "settle_work",
]

_MONTH = "date_trunc('month', now())::date"

#: SQL for the `org_usage.shard` a billed call adds to: the budget row when the call settles
#: a reservation, else one of 64 shards picked by the turn's id (`:turn_id`): as many as a
#: few processes' pools have connections, so that concurrent turn ends seldom meet on a row.
BUDGET_SHARD = "0"
TURN_SHARD = "(1 + get_byte(uuid_send(CAST(:turn_id AS uuid)), 15) % 64)"

#: The monthly limit in force for an org row `o` (LEAST ignores NULLs; NULL = no limit).
#: `start_turn` should read this instead of `o.monthly_budget_usd`.
LIMIT_SQL = "LEAST(o.monthly_budget_usd, o.budget_ceiling_usd)"

#: Appended to the SET list of the step write's `UPDATE turns ... AS _turn`.
SETTLE_TURN_SET = ", reserved_usd = GREATEST(reserved_usd - CAST(:released AS numeric), 0)"

#: Appended to the SET list of the step write's `org_usage` upsert (ON CONFLICT DO UPDATE).
#: Releases only if `_turn` (the step's turn UPDATE, guarded by status = 'running') matched.
SETTLE_USAGE_SET = (
    ", reserved_usd = GREATEST(org_usage.reserved_usd - (SELECT CASE WHEN EXISTS "
    "(SELECT 1 FROM _turn) THEN CAST(:released AS numeric) ELSE 0 END), 0)"
)

def _reserve_sql(live: str, held: str) -> sa.TextClause:
    """The reservation statement, one rule for every holder: `live` is a CTE body that has
    a row while the holder may still reserve, `held` one that records what the holder now
    holds (only when `_usage` took the amount) and returns a row per hold."""
    return sa.text(f"""
WITH _limit AS (
  SELECT {LIMIT_SQL} AS usd FROM orgs o WHERE o.id = CAST(:org_id AS uuid)
), _live AS ({live}
), _before AS (
  SELECT cost_usd, reserved_usd FROM org_usage
   WHERE org_id = CAST(:org_id AS uuid) AND month = {_MONTH} AND shard = 0
), _others AS (
  SELECT COALESCE(sum(cost_usd), 0) AS usd FROM org_usage
   WHERE org_id = CAST(:org_id AS uuid) AND month = {_MONTH} AND shard <> 0
), _usage AS (
  INSERT INTO org_usage AS u (org_id, month, shard, reserved_usd)
  SELECT CAST(:org_id AS uuid), {_MONTH}, 0, CAST(:amount AS numeric)
    FROM _limit
   WHERE EXISTS (SELECT 1 FROM _live)
     AND (_limit.usd IS NULL
          OR (SELECT usd FROM _others) + CAST(:amount AS numeric) <= _limit.usd)
  ON CONFLICT (org_id, month, shard) DO UPDATE
     SET reserved_usd = u.reserved_usd + EXCLUDED.reserved_usd
   WHERE (SELECT usd FROM _limit) IS NULL
      OR u.cost_usd + (SELECT usd FROM _others) + u.reserved_usd + EXCLUDED.reserved_usd
         <= (SELECT usd FROM _limit)
  RETURNING u.cost_usd, u.reserved_usd
), _held AS ({held}
)
SELECT (SELECT count(*) FROM _held) AS held, (SELECT usd FROM _limit) AS limit_usd,
       COALESCE((SELECT cost_usd FROM _usage), (SELECT cost_usd FROM _before), 0)
         + (SELECT usd FROM _others) AS spent,
       COALESCE((SELECT reserved_usd FROM _usage), (SELECT reserved_usd FROM _before), 0)
         AS reserved
""")


# A turn reserves while it runs; what it holds is on its own row.
_RESERVE = _reserve_sql(live="""
  SELECT 1 FROM turns
   WHERE id = CAST(:turn_id AS uuid) AND org_id = CAST(:org_id AS uuid) AND status = 'running'""",
                        held="""
  -- No status check here: if the turn closed since _live, the sweep releases this too.
  UPDATE turns SET reserved_usd = reserved_usd + CAST(:amount AS numeric)
   WHERE id = CAST(:turn_id AS uuid) AND org_id = CAST(:org_id AS uuid)
     AND EXISTS (SELECT 1 FROM _usage)
  RETURNING id""")

# Work outside a turn (an analysis) holds its reservation in a row of its own, which
# expires: a holder that dies is swept like a closed turn.
_RESERVE_WORK = _reserve_sql(live="\n  SELECT 1", held="""
  INSERT INTO work_reservations (id, org_id, label, amount, expires_at)
  SELECT CAST(:work_id AS uuid), CAST(:org_id AS uuid), :label, CAST(:amount AS numeric),
         now() + make_interval(secs => :ttl)
   WHERE EXISTS (SELECT 1 FROM _usage)
  RETURNING id""")

_SETTLE = sa.text(f"""
WITH _turn AS (
  UPDATE turns SET cost_usd = cost_usd + CAST(:cost AS numeric){SETTLE_TURN_SET}
   WHERE id = CAST(:turn_id AS uuid) AND org_id = CAST(:org_id AS uuid) AND status = 'running'
  RETURNING id
), _usage AS (
  INSERT INTO org_usage (org_id, month, shard, cost_usd)
  VALUES (CAST(:org_id AS uuid), {_MONTH}, {BUDGET_SHARD}, CAST(:cost AS numeric))
  ON CONFLICT (org_id, month, shard) DO UPDATE
    SET cost_usd = org_usage.cost_usd + EXCLUDED.cost_usd{SETTLE_USAGE_SET}
  RETURNING cost_usd
)
SELECT (SELECT count(*) FROM _turn) AS live,
       (SELECT cost_usd FROM _usage)
         + (SELECT COALESCE(sum(cost_usd), 0) FROM org_usage
             WHERE org_id = CAST(:org_id AS uuid) AND month = {_MONTH} AND shard <> 0)
         AS month_usd
""")

_RELEASE_CLOSED = sa.text(f"""
WITH _held AS (
  SELECT id, org_id, reserved_usd FROM turns
   WHERE reserved_usd > 0 AND status <> 'running'
   FOR UPDATE SKIP LOCKED
), _freed AS (
  UPDATE turns t SET reserved_usd = 0 FROM _held h WHERE t.id = h.id
  RETURNING h.org_id, h.reserved_usd AS usd
), _expired AS (
  DELETE FROM work_reservations w
   WHERE w.id IN (SELECT id FROM work_reservations WHERE expires_at < now()
                   FOR UPDATE SKIP LOCKED)
  RETURNING w.org_id, w.amount AS usd
), _by_org AS (
  SELECT org_id, sum(usd) AS usd
    FROM (SELECT * FROM _freed UNION ALL SELECT * FROM _expired) f GROUP BY org_id
), _usage AS (
  UPDATE org_usage u SET reserved_usd = GREATEST(u.reserved_usd - b.usd, 0)
    FROM _by_org b
   WHERE u.org_id = b.org_id AND u.month = {_MONTH} AND u.shard = 0
  RETURNING u.org_id
)
SELECT (SELECT count(*) FROM _freed) AS turns,
       (SELECT count(*) FROM _expired) AS work,
       (SELECT COALESCE(sum(usd), 0) FROM _freed) + (SELECT COALESCE(sum(usd), 0) FROM _expired)
         AS usd,
       (SELECT count(*) FROM _usage) AS orgs
""")

# A call outside a turn settles in the statement that records it: its row in model_calls
# (no thread, no turn; `purpose` is its label), its cost on the budget row, and the release
# of its reservation - only if the reservation is still there (the sweep may have given
# an expired one back already; releasing twice would over-admit).
_SETTLE_WORK = sa.text(f"""
WITH _held AS (
  DELETE FROM work_reservations
   WHERE id = CAST(:work_id AS uuid) AND org_id = CAST(:org_id AS uuid)
  RETURNING amount
), _usage AS (
  INSERT INTO org_usage (org_id, month, shard, cost_usd, tokens)
  VALUES (CAST(:org_id AS uuid), {_MONTH}, {BUDGET_SHARD}, CAST(:cost AS numeric), :tokens)
  ON CONFLICT (org_id, month, shard) DO UPDATE
    SET cost_usd = org_usage.cost_usd + EXCLUDED.cost_usd,
        tokens = org_usage.tokens + EXCLUDED.tokens,
        reserved_usd = GREATEST(org_usage.reserved_usd
                                - COALESCE((SELECT sum(amount) FROM _held), 0), 0)
  RETURNING cost_usd
), _mc AS (
  INSERT INTO model_calls (org_id, thread_id, turn_id, setup_id, step, purpose, provider, model,
    stop_reason, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
    usage_reported, usage_estimated, cost_usd, priced, duration_ms, request_meta, cost_source)
  SELECT CAST(:org_id AS uuid), NULL, NULL, NULL, 0, :label, :provider, :model, :stop_reason,
         :d_in, :d_out, :d_cr, :d_cw, :reported, :estimated, CAST(:cost AS numeric), :priced,
         :duration_ms, CAST(:meta AS jsonb), :cost_source
   WHERE :record
  RETURNING id
)
SELECT (SELECT id FROM _mc) AS call_id, (SELECT count(*) FROM _held) AS released
""")


@dataclass(frozen=True, slots=True)
class Reservation:
    held: bool  # False: the worst case does not fit (or the turn is no longer running)
    limit_usd: Decimal | None
    spent_usd: Decimal  # settled spend this month
    reserved_usd: Decimal  # held by calls in flight, this one included when held

    def refusal(self, amount: Decimal) -> str:
        """Why a reservation was refused, in words a user and the model can read."""
        return (f"the org's monthly budget of ${self.limit_usd} cannot cover this call's "
                f"worst case of ${amount} (spent ${self.spent_usd}, ${self.reserved_usd} "
                "held by calls in flight)")


@dataclass(frozen=True, slots=True)
class Released:
    turns: int
    usd: Decimal
    work: int = 0  # expired reservations of work outside a turn


def _dec(value: Any) -> Decimal:
    return Decimal(value) if value is not None else Decimal(0)


async def reserve(db: Database, scope: Scope, turn_id: UUID, amount: Decimal) -> Reservation:
    """Hold `amount` (a call's worst case, cost/estimate.py) against the org's budget for
    this month, if it fits: one statement, atomic across replicas. Call it only for orgs
    with a limit, and follow every held reservation with a settle of the same amount."""
    if amount < 0:
        raise ValueError("a reservation cannot be negative")
    params = {"org_id": scope.org_id, "turn_id": turn_id, "amount": amount}
    row = (await db.fetch(_RESERVE, params, write=True))[0]
    limit = row["limit_usd"]
    return Reservation(bool(row["held"]), Decimal(limit) if limit is not None else None,
                       _dec(row["spent"]), _dec(row["reserved"]))


async def settle(
    db: Database, scope: Scope, turn_id: UUID, *, cost_usd: Decimal, released_usd: Decimal
) -> Decimal | None:
    """Record a call's real cost and release its reservation in one statement (what the step
    write does with SETTLE_TURN_SET and SETTLE_USAGE_SET). Returns the month's spend."""
    params = {"org_id": scope.org_id, "turn_id": turn_id, "cost": cost_usd,
              "released": released_usd}
    row = (await db.fetch(_SETTLE, params, write=True))[0]
    return Decimal(row["month_usd"]) if row["month_usd"] is not None else None


async def release_closed(db: Database) -> Released:
    """Release what turns that are no longer running still hold (all orgs; the reaper's
    sweep). Idempotent; turns another sweeper has locked are left for the next one."""
    row = (await db.fetch(_RELEASE_CLOSED, {}, write=True))[0]
    return Released(int(row["turns"]), _dec(row["usd"]), int(row["work"]))


async def reserve_work(
    db: Database, scope: Scope, work_id: UUID, amount: Decimal, *, label: str, ttl: float,
) -> Reservation:
    """Hold `amount` for a model call outside a turn (the same rule as `reserve`), in a
    `work_reservations` row that the reaper's sweep gives back after `ttl` seconds if the
    holder never settles it. Follow every held reservation with `settle_work`."""
    if amount < 0:
        raise ValueError("a reservation cannot be negative")
    params = {"org_id": scope.org_id, "work_id": work_id, "amount": amount, "label": label,
              "ttl": float(ttl)}
    row = (await db.fetch(_RESERVE_WORK, params, write=True))[0]
    limit = row["limit_usd"]
    return Reservation(bool(row["held"]), Decimal(limit) if limit is not None else None,
                       _dec(row["spent"]), _dec(row["reserved"]))


async def settle_work(
    db: Database, scope: Scope, work_id: UUID, *, label: str, call: ModelCallRow | None,
) -> int | None:
    """Bill a call outside a turn and release its reservation in one statement; `call`
    None releases without billing (the call never ran). Returns the model call's id."""
    c = call
    params: dict[str, Any] = {
        "org_id": scope.org_id, "work_id": work_id, "label": label, "record": c is not None,
        "provider": c.provider if c else "", "model": c.model if c else "",
        "stop_reason": c.stop_reason if c else None,
        "d_in": c.input_tokens if c else 0, "d_out": c.output_tokens if c else 0,
        "d_cr": c.cache_read_tokens if c else 0, "d_cw": c.cache_write_tokens if c else 0,
        "reported": c.usage_reported if c else False,
        "estimated": c.usage_estimated if c else False,
        "cost": c.cost_usd if c else Decimal(0), "priced": c.priced if c else True,
        "duration_ms": c.duration_ms if c else 0,
        "meta": jsonenc.dumps(c.request_meta if c else {}),
        "cost_source": c.cost_source if c else "catalog",
        "tokens": (c.input_tokens + c.output_tokens + c.cache_read_tokens
                   + c.cache_write_tokens) if c else 0,
    }
    row = (await db.fetch(_SETTLE_WORK, params, write=True))[0]
    return int(row["call_id"]) if row["call_id"] is not None else None
