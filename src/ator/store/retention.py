"""Retention's statements: the trash, aged rows, and the purge audit (layer: store; imports
sqlalchemy, ator.store.*).

Every delete here is **bounded**: one statement removes at most `batch` rows of one table,
in its own short transaction under `SET LOCAL statement_timeout` and `lock_timeout`, so a
purge of millions of rows is many small statements that never hold a lock for long and give
way to the live traffic (a statement that would wait on a lock gives up and is tried at the
next pass). The caller loops until a batch comes back short.

Which tables hang off a thread (or a setup) is read from the catalog, not listed here:
every table with a `thread_id` (`setup_id`) column, so a table a feature adds later is
purged with its thread without touching this module. Two are special:
- `model_calls`: the money. Each batch of a purged thread's calls is summed per hour into
  `usage_purged` by the same statement that deletes it, so usage and caps (store/usage.py)
  read the same totals before and after.
- `threads` itself goes last, a subtree (subagent links: `parent_id`) at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Connection, Database
from ator.store.scope import Scope

__all__ = [
    "Bounds",
    "PurgeRecord",
    "Timing",
    "audit",
    "consumed_mailbox_due",
    "delete_aged",
    "delete_history",
    "delete_setup",
    "delete_thread_rows",
    "ensure_schedules",
    "expired_setups",
    "expired_threads",
    "export_thread",
    "get_policy",
    "idle_threads",
    "list_audit",
    "schedule_of",
    "set_policy",
    "setup_tables",
    "subtree",
    "thread_tables",
    "trash_due",
]

#: Tables whose rows of a thread are not deleted by the generic walk (see the docstring).
_SPECIAL = {"threads", "model_calls", "usage_purged"}


@dataclass(frozen=True, slots=True)
class Bounds:
    """How big and how long one statement may be."""

    batch: int = 1000
    statement_timeout: float = 5.0  # seconds
    lock_timeout: float = 1.0


@dataclass(slots=True)
class Timing:
    """What the statements of a purge did (the test of the bound reads it)."""

    statements: int = 0
    rows: int = 0
    largest: int = 0  # rows removed by the largest single statement
    slowest: float = 0.0  # seconds


@dataclass(frozen=True, slots=True)
class PurgeRecord:
    id: int
    what: str
    subject_id: UUID | None
    cutoff: datetime
    rows: dict[str, int]
    at: datetime


_COLUMN_TABLES = sa.text("""
SELECT c.table_name AS name FROM information_schema.columns c
  JOIN information_schema.tables t
    ON t.table_schema = c.table_schema AND t.table_name = c.table_name
 WHERE c.table_schema = current_schema() AND c.column_name = :column
   AND t.table_type = 'BASE TABLE'
 ORDER BY c.table_name
""")


async def _tables_with(db: Database, column: str) -> list[str]:
    rows = await db.read(_COLUMN_TABLES, {"column": column})
    return [str(r.name) for r in rows if r.name not in _SPECIAL]


async def thread_tables(db: Database) -> list[str]:
    """Every table with a `thread_id`, but threads and the money (docstring)."""
    return await _tables_with(db, "thread_id")


async def setup_tables(db: Database) -> list[str]:
    """Every table with a `setup_id`, but threads and the money."""
    return await _tables_with(db, "setup_id")


async def _bounded(db: Database, bounds: Bounds, timing: Timing, sql: sa.TextClause,
                   params: dict[str, Any]) -> int:
    """One statement in its own transaction under the bounds; returns its row count
    (the statement returns one row per row it touched, as `n`)."""
    loop = asyncio.get_running_loop()
    async with db.begin() as conn:
        await _limits(conn, bounds)
        started = loop.time()
        result = await conn.execute(sql, params)
        took = loop.time() - started
    n = int(result.one().n)
    timing.statements += 1
    timing.rows += n
    timing.largest = max(timing.largest, n)
    timing.slowest = max(timing.slowest, took)
    return n


async def _limits(conn: Connection, bounds: Bounds) -> None:
    await conn.execute(sa.text(
        "SELECT set_config('statement_timeout', :st, true), set_config('lock_timeout', :lt, true)"),
        {"st": f"{int(bounds.statement_timeout * 1000)}ms",
         "lt": f"{int(bounds.lock_timeout * 1000)}ms"})


def _quoted(table: str) -> str:
    if not table.replace("_", "").isalnum():
        raise ValueError(f"unexpected table name {table!r}")
    return f'"{table}"'


async def _drain(db: Database, bounds: Bounds, timing: Timing, sql: sa.TextClause,
                 params: dict[str, Any]) -> int:
    """Repeat a bounded statement until a batch comes back short; the total."""
    total = 0
    while True:
        n = await _bounded(db, bounds, timing, sql, {**params, "batch": bounds.batch})
        total += n
        if n < bounds.batch:
            return total


# The trash -------------------------------------------------------------------------------

_EXPIRED_THREADS = sa.text("""
SELECT id FROM threads
 WHERE org_id = :org_id AND deleted_at IS NOT NULL AND deleted_at < :cutoff
   AND (parent_id IS NULL OR parent_id NOT IN (
        SELECT id FROM threads WHERE org_id = :org_id AND deleted_at < :cutoff))
 ORDER BY deleted_at, id LIMIT :limit
""")

_SUBTREE = sa.text("""
WITH RECURSIVE tree(id, depth) AS (
  SELECT id, 0 FROM threads WHERE id = :id AND org_id = :org_id
  UNION ALL
  SELECT t.id, tree.depth + 1 FROM threads t JOIN tree ON t.parent_id = tree.id
)
SELECT id FROM tree ORDER BY depth DESC
""")


async def expired_threads(db: Database, scope: Scope, cutoff: datetime, limit: int
                          ) -> list[UUID]:
    """Threads in the trash since before `cutoff` whose parent is not (the top of each
    subtree that goes)."""
    rows = await db.read(_EXPIRED_THREADS, {"org_id": scope.org_id, "cutoff": cutoff,
                                            "limit": limit})
    return [r.id for r in rows]


async def subtree(db: Database, scope: Scope, thread_id: UUID) -> list[UUID]:
    """The thread and every descendant (subagents), deepest first."""
    rows = await db.read(_SUBTREE, {"id": thread_id, "org_id": scope.org_id})
    return [r.id for r in rows]


_ROLL_UP_CALLS = sa.text("""
WITH gone AS (
  DELETE FROM model_calls WHERE id IN (
    SELECT id FROM model_calls WHERE thread_id = ANY(CAST(:ids AS uuid[])) LIMIT :batch)
  RETURNING org_id, thread_id, setup_id, created_at, input_tokens, output_tokens,
            cache_read_tokens, cache_write_tokens, cost_usd, priced
), kept AS (
  INSERT INTO usage_purged (org_id, thread_id, setup_id, hour, calls, input_tokens,
                            output_tokens, cache_read_tokens, cache_write_tokens, cost_usd,
                            all_priced)
  SELECT org_id, thread_id, setup_id, date_trunc('hour', created_at), count(*),
         sum(input_tokens), sum(output_tokens), sum(cache_read_tokens),
         sum(cache_write_tokens), sum(cost_usd), bool_and(priced)
    FROM gone GROUP BY org_id, thread_id, setup_id, date_trunc('hour', created_at)
)
SELECT count(*) AS n FROM gone
""")


def _delete_by(table: str, column: str) -> sa.TextClause:
    q = _quoted(table)
    return sa.text(f"""
WITH gone AS (
  DELETE FROM {q} WHERE ctid IN (
    SELECT ctid FROM {q} WHERE {column} = ANY(CAST(:ids AS uuid[])) LIMIT :batch)
  RETURNING 1)
SELECT count(*) AS n FROM gone""")


_DELETE_THREADS = sa.text("""
WITH gone AS (
  DELETE FROM threads WHERE org_id = :org_id AND id = ANY(CAST(:ids AS uuid[])) RETURNING 1)
SELECT count(*) AS n FROM gone
""")


async def delete_thread_rows(db: Database, scope: Scope, ids: Sequence[UUID], *,
                             bounds: Bounds, timing: Timing) -> dict[str, int]:
    """Delete threads `ids` (already checked to be this org's, deepest first) and every row
    that hangs off them, in bounded batches; the model calls' money is kept in
    `usage_purged`. Returns rows removed per table."""
    idl = list(ids)
    counts: dict[str, int] = {}
    for table in await thread_tables(db):
        counts[table] = await _drain(db, bounds, timing, _delete_by(table, "thread_id"),
                                     {"ids": idl})
    counts["model_calls"] = await _drain(db, bounds, timing, _ROLL_UP_CALLS, {"ids": idl})
    # A subtree is one statement (a parent and its children go together: parent_id is
    # checked at the statement's end); subtrees are small next to their events.
    counts["threads"] = 0
    for start in range(0, len(idl), bounds.batch):
        counts["threads"] += await _bounded(db, bounds, timing, _DELETE_THREADS, {
            "org_id": scope.org_id, "ids": idl[start:start + bounds.batch]})
    return {k: v for k, v in counts.items() if v}


_EXPIRED_SETUPS = sa.text("""
SELECT s.id FROM setups s
 WHERE s.org_id = :org_id AND s.archived_at IS NOT NULL AND s.archived_at < :cutoff
   AND NOT EXISTS (SELECT 1 FROM threads t WHERE t.setup_id = s.id)
 ORDER BY s.archived_at, s.id LIMIT :limit
""")

_DELETE_SETUP = sa.text("""
WITH gone AS (DELETE FROM setups WHERE org_id = :org_id AND id = :id RETURNING 1)
SELECT count(*) AS n FROM gone
""")


async def expired_setups(db: Database, scope: Scope, cutoff: datetime, limit: int
                         ) -> list[UUID]:
    """Setups archived before `cutoff` that no thread uses any more (a setup goes after the
    last of its threads)."""
    rows = await db.read(_EXPIRED_SETUPS, {"org_id": scope.org_id, "cutoff": cutoff,
                                           "limit": limit})
    return [r.id for r in rows]


async def delete_setup(db: Database, scope: Scope, setup_id: UUID, *, bounds: Bounds,
                       timing: Timing) -> dict[str, int]:
    counts: dict[str, int] = {}
    for table in await setup_tables(db):
        counts[table] = await _drain(db, bounds, timing, _delete_by(table, "setup_id"),
                                     {"ids": [setup_id]})
    counts["setups"] = await _bounded(db, bounds, timing, _DELETE_SETUP,
                                      {"org_id": scope.org_id, "id": setup_id})
    return {k: v for k, v in counts.items() if v}


# Events and inspector records of idle threads ----------------------------------------------

_IDLE_THREADS = sa.text("""
SELECT t.id FROM threads t
 WHERE t.org_id = :org_id AND t.deleted_at IS NULL AND t.last_seq > 0
   AND (SELECT e.created_at FROM events e WHERE e.thread_id = t.id
         ORDER BY e.seq DESC LIMIT 1) < :cutoff
   AND NOT EXISTS (SELECT 1 FROM turns r WHERE r.thread_id = t.id AND r.status = 'running')
   AND NOT EXISTS (SELECT 1 FROM mailbox m WHERE m.thread_id = t.id AND m.turn_id IS NULL)
 ORDER BY t.id LIMIT :limit
""")

_CLEAR_META = sa.text("""
WITH gone AS (
  UPDATE model_calls SET request_meta = '{}'::jsonb WHERE id IN (
    SELECT id FROM model_calls WHERE thread_id = ANY(CAST(:ids AS uuid[]))
       AND request_meta <> '{}'::jsonb LIMIT :batch)
  RETURNING 1)
SELECT count(*) AS n FROM gone
""")

#: What an idle thread loses under the events policy: its log and stored tool results
#: (the inspector's records are cleared from model_calls; turns and the money stay).
_HISTORY_TABLES = ("events", "tool_results")


async def idle_threads(db: Database, scope: Scope, cutoff: datetime, limit: int
                       ) -> list[UUID]:
    """Live threads whose last event is older than `cutoff`, with no turn running and
    nothing waiting in their mailbox."""
    rows = await db.read(_IDLE_THREADS, {"org_id": scope.org_id, "cutoff": cutoff,
                                         "limit": limit})
    return [r.id for r in rows]


async def delete_history(db: Database, ids: Sequence[UUID], *, bounds: Bounds,
                         timing: Timing) -> dict[str, int]:
    """Delete the event logs and stored tool results of threads `ids` (this org's, checked
    by the caller) and clear their model calls' inspector records, in bounded batches.
    Their turns and usage stay."""
    idl = list(ids)
    counts = {t: await _drain(db, bounds, timing, _delete_by(t, "thread_id"), {"ids": idl})
              for t in _HISTORY_TABLES}
    counts["model_calls.request_meta"] = await _drain(db, bounds, timing, _CLEAR_META,
                                                      {"ids": idl})
    return {k: v for k, v in counts.items() if v}


# Aged rows --------------------------------------------------------------------------------

#: What ages out, by class: (table, the age column, extra condition).
_AGED: dict[str, tuple[str, str, str]] = {
    "mailbox": ("mailbox", "created_at", "turn_id IS NOT NULL"),
    "runs": ("workflow_runs", "finished_at",
             "status IN ('succeeded','failed','cancelled')"),
}


def _aged_sql(what: str) -> sa.TextClause:
    table, column, extra = _AGED[what]
    q = _quoted(table)
    return sa.text(f"""
WITH gone AS (
  DELETE FROM {q} WHERE ctid IN (
    SELECT ctid FROM {q} WHERE org_id = :org_id AND {extra} AND {column} < :cutoff
     LIMIT :batch)
  RETURNING 1)
SELECT count(*) AS n FROM gone""")


async def delete_aged(db: Database, scope: Scope, what: str, cutoff: datetime, *,
                      bounds: Bounds, timing: Timing) -> int:
    """Delete the org's rows of class `what` (mailbox: consumed items; runs: finished
    workflow runs, with their steps and events) older than
    `cutoff`, in bounded batches. Workflow runs cascade to their steps, so a batch of runs
    is a hundredth of the row batch."""
    if what == "runs":
        bounds = Bounds(max(1, bounds.batch // 100), bounds.statement_timeout,
                        bounds.lock_timeout)
    return await _drain(db, bounds, timing, _aged_sql(what),
                        {"org_id": scope.org_id, "cutoff": cutoff})


_DUE_TRASH = sa.text("""
SELECT count(*) AS n, min(deleted_at) AS oldest FROM threads
 WHERE org_id = :org_id AND deleted_at IS NOT NULL AND deleted_at < :cutoff
""")

_DUE_SETUPS = sa.text("""
SELECT count(*) AS n, min(archived_at) AS oldest FROM setups
 WHERE org_id = :org_id AND archived_at IS NOT NULL AND archived_at < :cutoff
""")

_DUE_MAILBOX = sa.text("""
SELECT count(*) AS n, min(created_at) AS oldest FROM mailbox
 WHERE org_id = :org_id AND turn_id IS NOT NULL AND created_at < :cutoff
""")


async def trash_due(db: Database, scope: Scope, cutoff: datetime
                    ) -> tuple[tuple[int, datetime | None], tuple[int, datetime | None]]:
    """(threads, setups) in the trash since before `cutoff`: how many, the oldest."""
    params = {"org_id": scope.org_id, "cutoff": cutoff}
    t = (await db.read(_DUE_TRASH, params))[0]
    s = (await db.read(_DUE_SETUPS, params))[0]
    return (int(t.n), t.oldest), (int(s.n), s.oldest)


async def consumed_mailbox_due(db: Database, scope: Scope, cutoff: datetime
                               ) -> tuple[int, datetime | None]:
    r = (await db.read(_DUE_MAILBOX, {"org_id": scope.org_id, "cutoff": cutoff}))[0]
    return int(r.n), r.oldest


# The audit --------------------------------------------------------------------------------

_AUDIT = sa.text("""
INSERT INTO purges (org_id, what, subject_id, cutoff, rows)
VALUES (:org_id, :what, :subject_id, :cutoff, CAST(:rows AS jsonb))
""")

_LIST_AUDIT = sa.text("""
SELECT id, what, subject_id, cutoff, rows, at FROM purges
 WHERE org_id = :org_id AND (CAST(:before AS bigint) IS NULL OR id < :before)
 ORDER BY id DESC LIMIT :limit
""")


async def audit(db: Database, scope: Scope, what: str, subject_id: UUID | None,
                cutoff: datetime, rows: dict[str, int]) -> None:
    """Record one purge (what went, under which cutoff, rows per table)."""
    await db.write(_AUDIT, {"org_id": scope.org_id, "what": what, "subject_id": subject_id,
                            "cutoff": cutoff, "rows": json.dumps(rows)})


async def list_audit(db: Database, scope: Scope, *, limit: int = 100,
                     before: int | None = None) -> list[PurgeRecord]:
    rows = await db.read(_LIST_AUDIT, {"org_id": scope.org_id, "limit": limit,
                                       "before": before})
    return [PurgeRecord(r.id, r.what, r.subject_id, r.cutoff, dict(r.rows), r.at)
            for r in rows]


# The org's policy and its schedule --------------------------------------------------------

_GET_POLICY = sa.text("SELECT settings -> 'retention' AS policy FROM orgs WHERE id = :org_id")

_SET_POLICY = sa.text("""
UPDATE orgs SET settings = settings || jsonb_build_object('retention', CAST(:policy AS jsonb))
 WHERE id = :org_id RETURNING id
""")

# One schedule per org, named `name`, made for every org that has none (idempotent: the
# (org, name) key makes a concurrent second insert a no-op).
_ENSURE_SCHEDULES = sa.text("""
INSERT INTO schedules (id, org_id, name, kind, payload, cron, zone, overlap, catch_up,
                       next_tick)
SELECT gen_random_uuid(), o.id, :name, :kind, '{}'::jsonb, :cron, 'UTC', 'skip', :catch_up,
       :next_tick
  FROM orgs o
 WHERE NOT EXISTS (SELECT 1 FROM schedules s WHERE s.org_id = o.id AND s.name = :name)
ON CONFLICT (org_id, name) DO NOTHING
RETURNING id
""")

_SCHEDULE_OF = sa.text("""
SELECT next_tick, last_tick FROM schedules WHERE org_id = :org_id AND name = :name
""")


async def get_policy(db: Database, scope: Scope) -> dict[str, Any]:
    """The org's own retention settings (only what it set)."""
    rows = await db.read(_GET_POLICY, {"org_id": scope.org_id})
    return dict(rows[0].policy or {}) if rows else {}


async def set_policy(db: Database, scope: Scope, policy: dict[str, Any]) -> None:
    await db.write(_SET_POLICY, {"org_id": scope.org_id, "policy": json.dumps(policy)})


async def ensure_schedules(db: Database, *, name: str, kind: str, cron: str,
                           next_tick: datetime) -> int:
    """Give every org without one its purge schedule; returns how many were made."""
    rows = await db.write(_ENSURE_SCHEDULES, {"name": name, "kind": kind, "cron": cron,
                                              "catch_up": 86_400.0, "next_tick": next_tick})
    return len(rows)


async def schedule_of(db: Database, scope: Scope, name: str
                      ) -> tuple[datetime, datetime | None] | None:
    """(next tick, last tick) of the org's schedule `name`, or None."""
    rows = await db.read(_SCHEDULE_OF, {"org_id": scope.org_id, "name": name})
    return (rows[0].next_tick, rows[0].last_tick) if rows else None


# Export -------------------------------------------------------------------------------------

_EXPORT_THREAD = sa.text("""
SELECT id, setup_id, parent_id, title, instructions, metadata, created_at, deleted_at
  FROM threads WHERE id = :id AND org_id = :org_id
""")

_EXPORT_EVENTS = sa.text("""
SELECT seq, turn_id, kind, data, created_at FROM events
 WHERE thread_id = :id AND org_id = :org_id AND seq > :after ORDER BY seq LIMIT :limit
""")

_EXPORT_TURNS = sa.text("""
SELECT id, status, stop_reason, error, steps, input_tokens, output_tokens,
       cache_read_tokens, cache_write_tokens, cost_usd, started_at, ended_at
  FROM turns WHERE thread_id = :id AND org_id = :org_id ORDER BY started_at, id
""")

_EXPORT_CALLS = sa.text("""
SELECT id, turn_id, step, purpose, provider, model, stop_reason, input_tokens,
       output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, priced, created_at
  FROM model_calls WHERE thread_id = :id AND org_id = :org_id ORDER BY id
""")

_EXPORT_CHILDREN = sa.text("""
SELECT id FROM threads WHERE parent_id = :id AND org_id = :org_id ORDER BY created_at, id
""")


async def export_thread(db: Database, scope: Scope, thread_id: UUID, *,
                        page: int = 1000) -> dict[str, Any] | None:
    """Everything of one thread (in the trash too) as plain values, or None when the org
    has no such thread. Events are read in pages of `page`."""
    params = {"id": thread_id, "org_id": scope.org_id}
    found = await db.read(_EXPORT_THREAD, params)
    if not found:
        return None
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        rows = await db.read(_EXPORT_EVENTS, {**params, "after": after, "limit": page})
        events.extend(_plain(r) for r in rows)
        if len(rows) < page:
            break
        after = rows[-1].seq
    return {"thread": _plain(found[0]), "events": events,
            "turns": [_plain(r) for r in await db.read(_EXPORT_TURNS, params)],
            "model_calls": [_plain(r) for r in await db.read(_EXPORT_CALLS, params)],
            "children": [r.id for r in await db.read(_EXPORT_CHILDREN, params)]}


def _plain(row: Any) -> dict[str, Any]:
    names: list[str] = row.keys()
    return {k: row[k] for k in names}
