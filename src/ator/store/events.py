"""The append-only event log of each thread (layer: store; imports sqlalchemy, ator.store.*,
ator.jsonenc).

`seq` is assigned in the same statement that inserts the events, by bumping
`threads.last_seq` (the row lock serializes writers of one thread), so seqs are dense, unique
per thread and visible only once committed. Other store modules splice `append_cte()` into
their own statements so a step's events, usage and turn update cost one round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.database import Database
from ator.store.records import Event
from ator.store.schema import events
from ator.store.scope import Scope

__all__ = [
    "HISTORY_KINDS",
    "append_cte",
    "event_params",
    "message_seq",
    "read_events",
    "read_events_before",
    "to_event",
]

# Event kinds the model's history is rebuilt from (the others are for people and tools).
HISTORY_KINDS = ("message", "notification", "assistant", "tool_results", "turn_ended",
                 "compaction")


def append_cte(guard: str | None = None) -> tuple[str, str]:
    """SQL fragments that append `:ev_kinds`/`:ev_datas` to thread `:thread_id`.

    Returns (ctes, insert): `ctes` is a `_seq AS (…)` WITH-item to join into the caller's WITH
    list, `insert` the final INSERT … RETURNING. When `guard` names another CTE, nothing is
    appended (and no seq consumed) unless that CTE returned a row.
    """
    cond = f" AND EXISTS (SELECT 1 FROM {guard})" if guard else ""
    ctes = (
        "_seq AS (UPDATE threads SET last_seq = last_seq + cardinality(CAST(:ev_kinds AS text[]))"
        " WHERE id = :thread_id AND org_id = :org_id"
        + cond
        + " RETURNING last_seq - cardinality(CAST(:ev_kinds AS text[])) AS base)"
    )
    insert = (
        "INSERT INTO events (org_id, thread_id, turn_id, seq, kind, data) "
        "SELECT :org_id, :thread_id, :turn_id, _seq.base + u.ord, u.kind, u.data::jsonb "
        "FROM _seq, unnest(CAST(:ev_kinds AS text[]), CAST(:ev_datas AS text[])) "
        "WITH ORDINALITY AS u(kind, data, ord) "
        "RETURNING seq, kind, data, turn_id, created_at"
    )
    return ctes, insert


def event_params(items: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    return {
        "ev_kinds": [k for k, _ in items],
        "ev_datas": [jsonenc.dumps(d) for _, d in items],
    }


def to_event(row: Any, thread_id: UUID | None = None) -> Event:
    return Event(row.seq, row.kind, row.data, row.turn_id, row.created_at, thread_id)


async def read_events(
    db: Database, scope: Scope, thread_id: UUID, *, after_seq: int = 0, limit: int = 200
) -> list[Event]:
    stmt = (
        sa.select(events.c.seq, events.c.kind, events.c.data, events.c.turn_id, events.c.created_at)
        .where(
            events.c.thread_id == thread_id,
            events.c.org_id == scope.org_id,
            events.c.seq > after_seq,
        )
        .order_by(events.c.seq)
        .limit(limit)
    )
    rows = await db.read(stmt)
    return [to_event(r, thread_id) for r in rows]


async def read_events_before(
    db: Database, scope: Scope, thread_id: UUID, *, before: int, limit: int
) -> tuple[list[Event], bool]:
    """The last `limit` events with a seq below `before`, in seq order, and whether older
    ones exist: a page of history read backwards (the console opens a chat this way)."""
    stmt = (
        sa.select(events.c.seq, events.c.kind, events.c.data, events.c.turn_id, events.c.created_at)
        .where(
            events.c.thread_id == thread_id,
            events.c.org_id == scope.org_id,
            events.c.seq < before,
        )
        .order_by(events.c.seq.desc())
        .limit(limit + 1)
    )
    rows = await db.read(stmt)
    page = [to_event(r, thread_id) for r in rows[:limit]]
    page.reverse()
    return page, len(rows) > limit


async def message_seq(db: Database, scope: Scope, thread_id: UUID, mailbox_id: str) -> int | None:
    """The seq of the `message` event that carries mailbox item `mailbox_id`, once a turn
    took it (None before): where a follower that missed notices catches up from."""
    stmt = sa.select(events.c.seq).where(
        events.c.thread_id == thread_id,
        events.c.org_id == scope.org_id,
        events.c.kind == "message",
        events.c.data["mailbox_id"].astext == mailbox_id,
    )
    rows = await db.read(stmt)
    return int(rows[0].seq) if rows else None
