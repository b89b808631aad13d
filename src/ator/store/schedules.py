"""Schedule rows (layer: store; imports sqlalchemy, asyncpg, ator.store.*).

`due` locks the schedules whose next tick has come (or that hold a buffered tick) with
`FOR NO KEY UPDATE SKIP LOCKED` (a foreign key's check on a schedule does not hide it); the
caller enqueues their jobs and `advance`s them in the same transaction, conditionally on the
`next_tick` it read. Two replicas therefore never fire one tick twice: the second either
skips the locked row or, after the first committed, no longer finds it due.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import sqlalchemy as sa

from ator.errors import Conflict
from ator.store.database import Connection, Database
from ator.store.scope import Scope

__all__ = ["ScheduleRow", "advance", "create", "delete", "due", "get", "list_for", "page",
           "set_enabled"]


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    id: UUID
    org_id: UUID
    name: str
    kind: str
    payload: dict[str, Any]
    cron: str
    zone: str
    overlap: str
    catch_up: float
    enabled: bool
    next_tick: datetime
    last_tick: datetime | None
    pending: datetime | None


_COLUMNS = ("id, org_id, name, kind, payload, cron, zone, overlap, catch_up, enabled, "
            "next_tick, last_tick, pending")

_CREATE = sa.text(f"""
INSERT INTO schedules (id, org_id, name, kind, payload, cron, zone, overlap, catch_up,
                       next_tick)
VALUES (:id, :org_id, :name, :kind, CAST(:payload AS jsonb), :cron, :zone, :overlap,
        :catch_up, :next_tick)
RETURNING {_COLUMNS}
""")

_LIST = sa.text(f"SELECT {_COLUMNS} FROM schedules WHERE org_id = :org_id ORDER BY name")

_PAGE = sa.text(f"""
SELECT {_COLUMNS} FROM schedules
 WHERE org_id = :org_id AND (CAST(:after AS text) IS NULL OR name > :after)
 ORDER BY name LIMIT :limit
""")

_GET = sa.text(f"SELECT {_COLUMNS} FROM schedules WHERE id = :id AND org_id = :org_id")

# Resuming moves the next tick to the first one after now: the ticks of the pause are not
# fired late (the catch-up window is for a scheduler that was down, not for a pause).
_SET_ENABLED = sa.text(f"""
UPDATE schedules SET enabled = :enabled, pending = NULL,
       next_tick = COALESCE(CAST(:next_tick AS timestamptz), next_tick)
 WHERE id = :id AND org_id = :org_id RETURNING {_COLUMNS}
""")

_DELETE = sa.text("DELETE FROM schedules WHERE id = :id AND org_id = :org_id RETURNING id")

# FOR NO KEY UPDATE, not FOR UPDATE: the pass changes no key, and FOR UPDATE also conflicts
# with the KEY SHARE lock a foreign key check takes. A firing's run that records its
# schedule (run_origins.schedule_id) holds that lock while its start commits, and SKIP
# LOCKED then passed the schedule over: under load, pass after pass, until its ticks fell
# out of the catch-up window and were lost.
_DUE = sa.text(f"""
SELECT {_COLUMNS} FROM schedules
 WHERE enabled AND (next_tick <= :now OR pending IS NOT NULL)
 ORDER BY next_tick LIMIT :limit
 FOR NO KEY UPDATE SKIP LOCKED
""")

_ADVANCE = sa.text("""
UPDATE schedules SET next_tick = :next_tick, last_tick = :last_tick, pending = :pending
 WHERE id = :id AND next_tick = :was
RETURNING id
""")


def _row(r: Any) -> ScheduleRow:
    return ScheduleRow(r["id"], r["org_id"], r["name"], r["kind"], r["payload"], r["cron"],
                       r["zone"], r["overlap"], r["catch_up"], r["enabled"], r["next_tick"],
                       r["last_tick"], r["pending"])


async def create(
    db: Database, scope: Scope, *, id: UUID, name: str, kind: str, payload: dict[str, Any],
    cron: str, zone: str, overlap: str, catch_up: float, next_tick: datetime,
) -> ScheduleRow:
    """Raises Conflict (`schedule_exists`) when the org has a schedule of that name."""
    try:
        rows = await db.fetch(_CREATE, {
            "id": id, "org_id": scope.org_id, "name": name, "kind": kind,
            "payload": json.dumps(payload), "cron": cron, "zone": zone, "overlap": overlap,
            "catch_up": catch_up, "next_tick": next_tick,
        }, write=True)
    except asyncpg.UniqueViolationError:
        raise Conflict(f"a schedule named {name!r} exists", code="schedule_exists") from None
    return _row(rows[0])


async def list_for(db: Database, scope: Scope) -> list[ScheduleRow]:
    return [_row(r) for r in await db.fetch(_LIST, {"org_id": scope.org_id}, write=False)]


async def page(db: Database, scope: Scope, *, after: str | None,
               limit: int) -> list[ScheduleRow]:
    """The org's schedules by name, after the name `after` (a cursor)."""
    rows = await db.fetch(_PAGE, {"org_id": scope.org_id, "after": after, "limit": limit},
                          write=False)
    return [_row(r) for r in rows]


async def get(db: Database, scope: Scope, schedule_id: UUID) -> ScheduleRow | None:
    rows = await db.fetch(_GET, {"id": schedule_id, "org_id": scope.org_id}, write=False)
    return _row(rows[0]) if rows else None


async def set_enabled(db: Database, scope: Scope, schedule_id: UUID, *, enabled: bool,
                      next_tick: datetime | None) -> ScheduleRow | None:
    """Pause or resume (with the next tick to move to, on resume). None: not the org's."""
    rows = await db.fetch(_SET_ENABLED, {"id": schedule_id, "org_id": scope.org_id,
                                         "enabled": enabled, "next_tick": next_tick},
                          write=True)
    return _row(rows[0]) if rows else None


async def delete(db: Database, scope: Scope, schedule_id: UUID) -> bool:
    rows = await db.fetch(_DELETE, {"id": schedule_id, "org_id": scope.org_id}, write=True)
    return bool(rows)


async def due(conn: Connection, now: datetime, limit: int) -> list[ScheduleRow]:
    """Lock and return schedules to act on (a due tick, or a buffered one)."""
    return [_row(r) for r in (await conn.execute(_DUE, {"now": now, "limit": limit})).all()]


async def advance(
    conn: Connection, row: ScheduleRow, *, next_tick: datetime, last_tick: datetime | None,
    pending: datetime | None,
) -> bool:
    """Move the schedule on, if nobody did since `due` read it."""
    result = await conn.execute(_ADVANCE, {"id": row.id, "was": row.next_tick,
                                           "next_tick": next_tick, "last_tick": last_tick,
                                           "pending": pending})
    return result.first() is not None
