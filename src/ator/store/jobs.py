"""The job queue's statements (layer: store; imports sqlalchemy, asyncpg, ator.store.*).

A job row goes queued → running (under a lease: `lease_owner` + `lease_until`, fenced by
`attempt`) → done | dead, or back to queued to retry. Every transition is one statement:

- `claim`: one statement that (a) rescues expired leases (back to queued, or dead when the
  attempts are spent), and (b) claims a batch fairly: it walks the (kind, org) pairs that have
  queued jobs by skip scan over `ix_jobs_ready`, one walk per kind it serves (a few index
  probes, however many jobs one org has queued, and none at all into the backlog of a kind
  it does not serve: a probe over `kind = ANY(…)` ordered by (kind, org) read every queued
  job of the kinds between), keeps the pairs that can give a job now (one is ready and the
  org is under its per-org limit), orders them round-robin from a cursor the worker keeps,
  gives each pair an equal share of the batch (less its per-org limit's running jobs), and
  takes each share with `FOR UPDATE SKIP LOCKED`. One org's 100,000 queued jobs cost the
  claim as much as its one.
- `complete_many` / `complete_in`: fenced by (id, attempt, owner), so a worker that lost its
  lease cannot complete a job another worker now holds. `complete_in` runs on the caller's
  transaction (exactly-once for effects written in it).
- `fail`, `heartbeat`, `release`, `replay`, `prune`.

NOTIFY on `ator_jobs` is sent by the enqueue statement itself, so an enqueue inside a
caller's transaction wakes workers when (and only if) that transaction commits.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import sqlalchemy as sa

from ator.errors import Conflict
from ator.store import notify
from ator.store.database import Connection, Database
from ator.store.scope import Scope

__all__ = [
    "CHANNEL",
    "ClaimedJob",
    "JobRow",
    "NewJob",
    "claim",
    "claim_serialized",
    "complete_in",
    "complete_many",
    "counts",
    "enqueue",
    "enqueue_many",
    "fail",
    "get",
    "heartbeat",
    "listen",
    "prune",
    "release",
    "replay",
]

CHANNEL = "ator_jobs"
_ACTIVE = "state IN ('queued','running')"  # the scope of a unique key


@dataclass(frozen=True, slots=True)
class NewJob:
    kind: str
    payload: dict[str, Any]
    max_attempts: int
    priority: int = 0
    run_at: datetime | None = None
    unique_key: str | None = None
    request_id: str | None = None
    schedule_id: UUID | None = None
    tick: datetime | None = None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    id: int
    org_id: UUID
    kind: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    request_id: str | None
    schedule_id: UUID | None
    tick: datetime | None
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    id: int
    org_id: UUID
    kind: str
    state: str
    attempt: int
    max_attempts: int
    run_at: datetime
    last_error: str | None
    request_id: str | None
    finished_at: datetime | None


_ENQUEUE = sa.text(f"""
WITH ins AS (
  INSERT INTO jobs (org_id, kind, payload, priority, run_at, max_attempts, unique_key,
                    request_id, schedule_id, tick, traceparent)
  VALUES (:org_id, :kind, CAST(:payload AS jsonb), :priority, COALESCE(:run_at, now()),
          :max_attempts, :unique_key, :request_id, :schedule_id, :tick, :traceparent)
  ON CONFLICT (org_id, kind, unique_key) WHERE unique_key IS NOT NULL AND {_ACTIVE}
  DO NOTHING
  RETURNING id)
SELECT id, pg_notify('{CHANNEL}', '') FROM ins
""")

_ENQUEUE_MANY = sa.text(f"""
WITH ins AS (
  INSERT INTO jobs (org_id, kind, payload, priority, max_attempts, request_id, traceparent)
  SELECT :org_id, :kind, CAST(p AS jsonb), :priority, :max_attempts, :request_id,
         :traceparent
    FROM unnest(CAST(:payloads AS text[])) AS p
  RETURNING id)
SELECT count(*) AS n, pg_notify('{CHANNEL}', '') FROM ins
""")

# See the module docstring. `:kinds` / `:limits` are parallel arrays (limit NULL = none).
_CLAIM = sa.text("""
WITH RECURSIVE rescued AS (
  UPDATE jobs SET
    state = CASE WHEN attempt >= max_attempts THEN 'dead' ELSE 'queued' END,
    finished_at = CASE WHEN attempt >= max_attempts THEN now() END,
    last_error = 'lease expired: the worker holding attempt ' || attempt || ' stopped',
    lease_owner = NULL, lease_until = NULL, run_at = now()
  WHERE id IN (SELECT id FROM jobs WHERE state = 'running' AND lease_until < now()
                LIMIT 1000 FOR UPDATE SKIP LOCKED)
  RETURNING id
),
-- One walk per kind this worker serves, each probe an index descent on (kind, org_id):
-- a backlog of a kind it does not serve is never read, and neither is another kind's.
pairs(kind, org_id) AS (
  SELECT k.kind, (SELECT j.org_id FROM jobs j WHERE j.state = 'queued' AND j.kind = k.kind
                   ORDER BY j.org_id LIMIT 1)
    FROM unnest(CAST(:kinds AS text[])) AS k(kind)
  UNION ALL
  SELECT p.kind, (SELECT j.org_id FROM jobs j
                   WHERE j.state = 'queued' AND j.kind = p.kind AND j.org_id > p.org_id
                   ORDER BY j.org_id LIMIT 1)
    FROM pairs p WHERE p.org_id IS NOT NULL
),
turn AS (
  SELECT p.kind, p.org_id, free.room FROM pairs p
    JOIN unnest(CAST(:kinds AS text[]), CAST(:limits AS int[])) AS l(kind, lim)
      ON l.kind = p.kind
    -- What the org may still run of a kind with a per-org limit (NULL: no limit).
    CROSS JOIN LATERAL (SELECT CASE WHEN l.lim IS NOT NULL THEN l.lim - (
        SELECT count(*) FROM jobs r WHERE r.kind = p.kind AND r.org_id = p.org_id
                                      AND r.state = 'running') END AS room) free
   WHERE p.org_id IS NOT NULL
     -- Only pairs that can give a job now take a place in the batch: a pair whose queued
     -- jobs all wait (a backoff, a `wait` step) or that is at its per-org limit would
     -- claim nothing, and a batch's worth of them ahead of the cursor starved every org
     -- behind them for good (the cursor moves only on what is claimed).
     AND EXISTS (SELECT 1 FROM jobs j WHERE j.kind = p.kind AND j.org_id = p.org_id
                    AND j.state = 'queued' AND j.run_at <= now())
     AND (free.room IS NULL OR free.room > 0)
   ORDER BY p.org_id <= CAST(:cursor AS uuid) NULLS FIRST, p.org_id, p.kind
   LIMIT :batch
),
share AS (SELECT GREATEST(1, CEIL(CAST(:batch AS float) / GREATEST(count(*), 1)))::int AS n
            FROM turn),
picked AS (
  SELECT c.id FROM turn, share, LATERAL (
    SELECT j.id FROM jobs j
     WHERE j.kind = turn.kind AND j.org_id = turn.org_id AND j.state = 'queued'
       AND j.run_at <= now()
     ORDER BY j.priority DESC, j.run_at, j.id
     LIMIT CASE WHEN turn.room IS NULL THEN share.n ELSE LEAST(share.n, turn.room) END
     FOR UPDATE SKIP LOCKED) c
  LIMIT :batch
)
UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, lease_owner = :owner,
       lease_until = now() + make_interval(secs => :ttl)
  FROM picked WHERE jobs.id = picked.id
RETURNING jobs.id, jobs.org_id, jobs.kind, jobs.payload, jobs.attempt, jobs.max_attempts,
          jobs.request_id, jobs.schedule_id, jobs.tick, jobs.traceparent
""")

# The statements that write several jobs of one owner at once (completions, heartbeats,
# hand-backs) can run at the same moment on one worker's connections: each locks its rows
# in id order first (`_OWNED`), or two of them could lock the same rows in opposite orders
# and deadlock.
_OWNED = """
WITH owned AS (
  SELECT jobs.id FROM jobs
    JOIN unnest(CAST(:ids AS bigint[]), CAST(:attempts AS int[])) AS d(id, attempt)
      ON jobs.id = d.id AND jobs.attempt = d.attempt
   WHERE jobs.state = 'running' AND jobs.lease_owner = :owner
   ORDER BY jobs.id FOR NO KEY UPDATE OF jobs)"""

_COMPLETE_MANY = sa.text(_OWNED + """
UPDATE jobs SET state = 'done', finished_at = now(), lease_owner = NULL, lease_until = NULL
  FROM owned WHERE jobs.id = owned.id
RETURNING jobs.id
""")

_COMPLETE_ONE = sa.text("""
UPDATE jobs SET state = 'done', finished_at = now(), lease_owner = NULL, lease_until = NULL
 WHERE id = :id AND attempt = :attempt AND state = 'running' AND lease_owner = :owner
RETURNING id
""")

_FAIL = sa.text("""
UPDATE jobs SET
  state = CASE WHEN attempt >= max_attempts THEN 'dead' ELSE 'queued' END,
  finished_at = CASE WHEN attempt >= max_attempts THEN now() END,
  run_at = now() + make_interval(secs => :delay),
  last_error = :error, lease_owner = NULL, lease_until = NULL
 WHERE id = :id AND attempt = :attempt AND state = 'running' AND lease_owner = :owner
RETURNING state
""")

_HEARTBEAT = sa.text("""
WITH owned AS (
  SELECT id FROM jobs
   WHERE id = ANY(CAST(:ids AS bigint[])) AND state = 'running' AND lease_owner = :owner
   ORDER BY id FOR NO KEY UPDATE)
UPDATE jobs SET lease_until = now() + make_interval(secs => :ttl)
  FROM owned WHERE jobs.id = owned.id
RETURNING jobs.id
""")

# Handing a job back (shutdown) does not spend its attempt.
_RELEASE = sa.text(_OWNED + """
UPDATE jobs SET state = 'queued', attempt = jobs.attempt - 1, run_at = now(),
       lease_owner = NULL, lease_until = NULL
  FROM owned WHERE jobs.id = owned.id
RETURNING jobs.id, pg_notify('ator_jobs', '')
""")

_REPLAY = sa.text(f"""
UPDATE jobs SET state = 'queued', attempt = 0, run_at = now(), finished_at = NULL
 WHERE id = :id AND org_id = :org_id AND state = 'dead'
RETURNING id, pg_notify('{CHANNEL}', '')
""")

_GET = sa.text("""
SELECT id, org_id, kind, state, attempt, max_attempts, run_at, last_error, request_id,
       finished_at
  FROM jobs WHERE id = :id AND org_id = :org_id
""")

_PRUNE = sa.text("""
DELETE FROM jobs WHERE id IN (
  SELECT id FROM jobs WHERE state = :state AND finished_at < now() - make_interval(secs => :age)
   LIMIT :limit)
""")

_COUNTS = sa.text("""
SELECT state, count(*) AS n FROM jobs
 WHERE org_id = :org_id AND (CAST(:kind AS text) IS NULL OR kind = :kind)
 GROUP BY state
""")


def _dumps(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"))


async def enqueue(target: Database | Connection, scope: Scope, job: NewJob) -> int | None:
    """Insert a job (on the pool, or on a caller's transaction so it commits with the
    caller's rows). Returns its id, or None when a job of the same org, kind and unique key
    is already queued or running."""
    params = {
        "org_id": scope.org_id, "kind": job.kind, "payload": _dumps(job.payload),
        "priority": job.priority, "run_at": job.run_at, "max_attempts": job.max_attempts,
        "unique_key": job.unique_key, "request_id": job.request_id,
        "schedule_id": job.schedule_id, "tick": job.tick, "traceparent": job.traceparent,
    }
    if isinstance(target, Database):
        rows: Sequence[Any] = await target.fetch(_ENQUEUE, params, write=True)
    else:
        rows = (await target.execute(_ENQUEUE, params)).all()
    return int(rows[0]["id"]) if rows else None


async def enqueue_many(
    target: Database | Connection, scope: Scope, kind: str, payloads: Sequence[dict[str, Any]],
    *, max_attempts: int, priority: int = 0, request_id: str | None = None,
    traceparent: str | None = None,
) -> int:
    """Insert many jobs of one kind in one statement (on the pool, or on a caller's
    transaction); returns how many."""
    params = {
        "org_id": scope.org_id, "kind": kind, "payloads": [_dumps(p) for p in payloads],
        "priority": priority, "max_attempts": max_attempts, "request_id": request_id,
        "traceparent": traceparent,
    }
    if isinstance(target, Database):
        rows: Sequence[Any] = await target.fetch(_ENQUEUE_MANY, params, write=True)
    else:
        rows = (await target.execute(_ENQUEUE_MANY, params)).all()
    return int(rows[0]["n"])


async def claim(
    db: Database | Connection, *, owner: str, kinds: Sequence[str],
    limits: Sequence[int | None], batch: int, ttl: float, cursor: UUID | None,
) -> list[ClaimedJob]:
    """Rescue expired leases and claim up to `batch` ready jobs fairly (module docstring).
    Jobs come back in claim order; the last one's org is the next call's cursor."""
    params = {"owner": owner, "kinds": list(kinds), "limits": list(limits), "batch": batch,
              "ttl": ttl, "cursor": cursor}
    if isinstance(db, Database):
        rows: Sequence[Any] = await db.fetch(_CLAIM, params, write=True)
    else:
        rows = (await db.execute(_CLAIM, params)).all()
    return [ClaimedJob(r["id"], r["org_id"], r["kind"], r["payload"], r["attempt"],
                       r["max_attempts"], r["request_id"], r["schedule_id"], r["tick"],
                       r["traceparent"])
            for r in rows]


_CLAIM_LOCK = sa.text("SELECT pg_advisory_xact_lock(:key)")
_LIMITED_CLAIMS = 0x61746F726A  # "atorj": serializes claims of kinds with per-org limits


async def claim_serialized(db: Database, **claim_args: Any) -> list[ClaimedJob]:
    """`claim` under a transaction-scoped advisory lock taken *before* the claim's snapshot,
    so a per-org limit counts the running jobs every other claimer has committed (two
    concurrent claims could otherwise both see room for the last slot)."""
    async with db.begin() as conn:
        await conn.execute(_CLAIM_LOCK, {"key": _LIMITED_CLAIMS})
        return await claim(conn, **claim_args)


async def complete_many(
    db: Database, owner: str, done: Sequence[tuple[int, int]]
) -> set[int]:
    """Mark (id, attempt) pairs done; returns the ids this owner still held."""
    rows = await db.fetch(_COMPLETE_MANY, {
        "ids": [d[0] for d in done], "attempts": [d[1] for d in done], "owner": owner,
    }, write=True)
    return {int(r["id"]) for r in rows}


async def complete_in(conn: Connection, owner: str, job_id: int, attempt: int) -> bool:
    """Mark a job done inside the caller's transaction; False when the lease is lost."""
    result = await conn.execute(_COMPLETE_ONE, {"id": job_id, "attempt": attempt,
                                                "owner": owner})
    return result.first() is not None


async def fail(
    db: Database, owner: str, job_id: int, attempt: int, *, delay: float, error: str
) -> str | None:
    """Record a failed attempt: queued again after `delay`, or dead when the attempts are
    spent. Returns the new state, or None when the lease was lost."""
    rows = await db.fetch(_FAIL, {"id": job_id, "attempt": attempt, "owner": owner,
                                  "delay": delay, "error": error[:4000]}, write=True)
    return str(rows[0]["state"]) if rows else None


async def heartbeat(db: Database, owner: str, ids: Sequence[int], ttl: float) -> set[int]:
    """Extend the leases; returns the ids still held (the others were lost)."""
    rows = await db.fetch(_HEARTBEAT, {"ids": list(ids), "owner": owner, "ttl": ttl},
                          write=True)
    return {int(r["id"]) for r in rows}


async def release(db: Database, owner: str, held: Sequence[tuple[int, int]]) -> int:
    """Hand jobs back to the queue without spending their attempt (graceful shutdown)."""
    rows = await db.fetch(_RELEASE, {
        "ids": [h[0] for h in held], "attempts": [h[1] for h in held], "owner": owner,
    }, write=True)
    return len(rows)


async def replay(db: Database, scope: Scope, job_id: int) -> None:
    """Queue a dead job again with fresh attempts (its last error stays until it runs).
    Raises Conflict when it is not dead (or not this org's), or when a job with its unique
    key is already active."""
    try:
        rows = await db.fetch(_REPLAY, {"id": job_id, "org_id": scope.org_id}, write=True)
    except asyncpg.UniqueViolationError:
        raise Conflict("a job with the same unique key is already queued or running",
                       code="job_duplicate") from None
    if not rows:
        raise Conflict("only a dead job of this org can be replayed", code="job_not_dead")


async def get(db: Database, scope: Scope, job_id: int) -> JobRow | None:
    rows = await db.fetch(_GET, {"id": job_id, "org_id": scope.org_id}, write=False)
    if not rows:
        return None
    r = rows[0]
    return JobRow(r["id"], r["org_id"], r["kind"], r["state"], r["attempt"], r["max_attempts"],
                  r["run_at"], r["last_error"], r["request_id"], r["finished_at"])


async def counts(db: Database, scope: Scope, kind: str | None = None) -> dict[str, int]:
    rows = await db.fetch(_COUNTS, {"org_id": scope.org_id, "kind": kind}, write=False)
    return {str(r["state"]): int(r["n"]) for r in rows}


async def prune(db: Database, *, state: str, age: float, limit: int = 10_000) -> int:
    """Delete up to `limit` rows in a terminal state finished more than `age` seconds ago."""
    sql, args = db.compile(_PRUNE, {"state": state, "age": age, "limit": limit})
    db.stats.statements += 1
    db.stats.commits += 1
    status: str = await db.pool.execute(sql, *args)
    return int(status.split()[-1])


@asynccontextmanager
async def listen(db: Database, on_notify: Callable[[], None]) -> AsyncIterator[asyncio.Event]:
    """LISTEN on the jobs channel on a connection held for the block (store/notify.py);
    `on_notify` is called (synchronously) for every notification. Yields an event set when
    the connection is lost (the caller listens again; it polls meanwhile)."""
    async with notify.listen(db, CHANNEL, lambda _payload: on_notify()) as lost:
        yield lost
