"""Where a workflow run came from (layer: store; imports sqlalchemy, ator.store.*).

A run started by a schedule keeps (schedule, tick); a run started by a conversation keeps
(thread, tool-use id) and the budget it was given. Written in the transaction that starts
the run, so a run that ends at once still has its origin.

When a run ends (`run_succeeded`, `run_failed`, `run_cancelled`: store/workflows.py's
`add_event`), `ended` queues the `NOTIFY_KIND` job in that same transaction if a thread
started the run: the workflows extension registers that kind, and its handler tells the
thread once (agent/notices.py). A lost worker runs the job again; the thread's mailbox
claim keeps the second telling a no-op.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.store import jobs as job_store
from ator.store.database import Connection, Database, Row
from ator.store.jobs import NewJob
from ator.store.scope import Scope

__all__ = ["NOTIFY_KIND", "Origin", "active_of_schedule", "by_call", "ended", "get", "insert"]

NOTIFY_KIND = "workflow.notify"  # registered by workflows/extension.py


@dataclass(frozen=True, slots=True)
class Origin:
    schedule_id: UUID | None = None
    tick: datetime | None = None
    thread_id: UUID | None = None
    tool_use_id: str | None = None
    budget: dict[str, Any] = field(default_factory=dict)


_INSERT = sa.text("""
INSERT INTO run_origins (run_id, org_id, schedule_id, tick, thread_id, tool_use_id, budget)
VALUES (:run_id, :org_id, :schedule_id, :tick, :thread_id, :tool_use_id,
        CAST(:budget AS jsonb))
ON CONFLICT DO NOTHING
""")

_GET = sa.text("""
SELECT run_id, schedule_id, tick, thread_id, tool_use_id, budget FROM run_origins
 WHERE run_id = :run_id AND org_id = :org_id
""")

_BY_CALL = sa.text("""
SELECT run_id FROM run_origins
 WHERE org_id = :org_id AND thread_id = :thread_id AND tool_use_id = :tool_use_id
""")

# The schedule's runs still going (running, paused or waiting on a gate: it may go on).
_ACTIVE = sa.text("""
SELECT r.id FROM run_origins o JOIN workflow_runs r ON r.id = o.run_id
 WHERE o.schedule_id = :schedule_id AND o.org_id = :org_id
   AND r.status IN ('running', 'paused', 'waiting')
 LIMIT 1
""")

_THREAD_OF = sa.text("SELECT org_id, thread_id FROM run_origins "
                     "WHERE run_id = :run_id AND thread_id IS NOT NULL")


async def insert(conn: Connection, scope: Scope, run_id: UUID, origin: Origin) -> None:
    await conn.execute(_INSERT, {
        "run_id": run_id, "org_id": scope.org_id, "schedule_id": origin.schedule_id,
        "tick": origin.tick, "thread_id": origin.thread_id, "tool_use_id": origin.tool_use_id,
        "budget": json.dumps(origin.budget)})


async def get(db: Database, scope: Scope, run_id: UUID) -> Row | None:
    rows = await db.read(_GET, {"run_id": run_id, "org_id": scope.org_id})
    return rows[0] if rows else None


async def by_call(db: Database, scope: Scope, thread_id: UUID, tool_use_id: str) -> UUID | None:
    """The run a thread's tool call started, if any."""
    rows = await db.read(_BY_CALL, {"org_id": scope.org_id, "thread_id": thread_id,
                                    "tool_use_id": tool_use_id})
    return rows[0]["run_id"] if rows else None


async def active_of_schedule(db: Database, scope: Scope, schedule_id: UUID) -> UUID | None:
    """A run of the schedule that is still going (None: none is)."""
    rows = await db.read(_ACTIVE, {"schedule_id": schedule_id, "org_id": scope.org_id})
    return rows[0]["id"] if rows else None


async def ended(conn: Connection, run_id: UUID) -> None:
    """The run ended: queue the telling of the thread that started it (if one did), in the
    caller's transaction."""
    row = (await conn.execute(_THREAD_OF, {"run_id": run_id})).first()
    if row is None:
        return
    await job_store.enqueue(conn, Scope(row.org_id), NewJob(
        kind=NOTIFY_KIND, payload={"run_id": str(run_id)}, max_attempts=10,
        unique_key=f"notify:{run_id}"))
