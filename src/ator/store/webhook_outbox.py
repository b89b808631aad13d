"""The webhook outbox: events written in the transaction of what they report, with the job
that fans each out (layer: store; imports sqlalchemy, ator.jsonenc, ator.store.*).

An event is written only when an enabled endpoint of its org wants its type:

- `TurnOutbox` is a step part of a turn's final statement (`turn.ended`, and
  `budget.reached` when the turn ended on a budget): both exist if and only if the turn's
  end committed;
- `emit` writes one on a caller's transaction (`endpoint.disabled`, and any type a feature
  registers, e.g. `approval.requested`);
- `run_ended` is called by the statement that appends a run's end event (`run.ended`,
  store/workflows.py `add_event`).

Its body (`envelope`) is the exact bytes every attempt signs.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.database import Connection
from ator.store.jobs import CHANNEL
from ator.store.parts import PartSql

__all__ = ["DISPATCH", "DISPATCH_ATTEMPTS", "TurnOutbox", "emit", "envelope",
           "run_ended"]

#: The job kind that fans an event out to its endpoints (handled in webhooks.delivery).
DISPATCH = "webhooks.dispatch"
DISPATCH_ATTEMPTS = 10


def envelope(event_type: str, data: dict[str, Any]) -> str:
    """An event's body, the bytes every attempt signs: `{type, timestamp, data}`."""
    return jsonenc.dumps({"type": event_type, "timestamp": datetime.now(UTC).isoformat(),
                          "data": data})


# A turn's events and their fan-out jobs, written by its final statement only when the turn
# is still running (`_turn` has its row), each only when an enabled endpoint of the org
# wants its type. A turn that did not commit leaves none.
_TURN_EVENTS = PartSql("webhooks.turn_events", ctes=("""_wh_event AS (
  INSERT INTO webhook_events (id, org_id, type, body)
  SELECT e.id, :org_id, e.type, e.body
    FROM unnest(CAST(:event_ids AS uuid[]), CAST(:event_types AS text[]),
                CAST(:event_bodies AS text[])) AS e(id, type, body)
   WHERE EXISTS (SELECT 1 FROM _turn)
     AND EXISTS (SELECT 1 FROM webhook_endpoints w
                  WHERE w.org_id = :org_id AND w.enabled
                    AND (cardinality(w.event_types) = 0 OR e.type = ANY(w.event_types)))
  RETURNING id
)""", """_wh_job AS (
  INSERT INTO jobs (org_id, kind, payload, max_attempts)
  SELECT :org_id, :kind, jsonb_build_object('event_id', id), :attempts FROM _wh_event
  RETURNING id
)"""), selects=(f"(SELECT count(pg_notify('{CHANNEL}', '')) FROM _wh_job) AS webhook_jobs",),
    params=frozenset({"event_ids", "event_types", "event_bodies", "kind", "attempts"}))


@dataclass(frozen=True, slots=True)
class TurnOutbox:
    """A step part of a turn's final write: its events (type, body) and their jobs."""

    events: tuple[tuple[str, str], ...]
    job_kind: str = DISPATCH
    max_attempts: int = DISPATCH_ATTEMPTS
    sql: ClassVar[PartSql] = _TURN_EVENTS

    def values(self) -> dict[str, Any]:
        return {"event_ids": [uuid.uuid4() for _ in self.events],
                "event_types": [t for t, _ in self.events],
                "event_bodies": [b for _, b in self.events], "kind": self.job_kind,
                "attempts": self.max_attempts}


_EMIT = sa.text(f"""
WITH ev AS (
  INSERT INTO webhook_events (id, org_id, type, body)
  SELECT :id, :org_id, CAST(:type AS text), :body
   WHERE EXISTS (SELECT 1 FROM webhook_endpoints w
                  WHERE w.org_id = :org_id AND w.enabled
                    AND (cardinality(w.event_types) = 0
                         OR CAST(:type AS text) = ANY(w.event_types)))
  RETURNING id),
job AS (
  INSERT INTO jobs (org_id, kind, payload, max_attempts)
  SELECT :org_id, '{DISPATCH}', jsonb_build_object('event_id', id), {DISPATCH_ATTEMPTS}
    FROM ev RETURNING id)
SELECT count(pg_notify('{CHANNEL}', '')) AS jobs FROM job""")


async def emit(conn: Connection, org_id: UUID, event_type: str,
               data: dict[str, Any]) -> UUID | None:
    """Write an event and its fan-out job on the caller's transaction, if an enabled
    endpoint of the org wants the type; returns its id (its `webhook-id` is `msg_<hex>`),
    or None when no endpoint wants it."""
    event_id = uuid.uuid4()
    row = (await conn.execute(_EMIT, {"id": event_id, "org_id": org_id, "type": event_type,
                                      "body": envelope(event_type, data)})).one()
    return event_id if row["jobs"] else None


_RUN = sa.text("""
SELECT id, org_id, workflow_id, version, status, fail_reason, cancel_reason, error,
       steps_used, idempotency_key, finished_at FROM workflow_runs WHERE id = :id""")


async def run_ended(conn: Connection, run_id: UUID, kind: str, data: dict[str, Any]) -> None:
    """A `run.ended` for the run whose end event `kind` is being appended (on that
    statement's transaction: the event exists if and only if the run's end committed)."""
    row = (await conn.execute(_RUN, {"id": run_id})).first()
    if row is None:
        return
    await emit(conn, row["org_id"], "run.ended", {
        "org_id": str(row["org_id"]), "run_id": str(row["id"]),
        "workflow_id": str(row["workflow_id"]), "version": row["version"],
        "status": row["status"], "reason": row["fail_reason"] or row["cancel_reason"],
        "error": row["error"], "steps": row["steps_used"], "key": row["idempotency_key"],
        "event": kind, "finished_at": row["finished_at"].isoformat()
        if row["finished_at"] else None})
