"""Webhook rows and statements (layer: store; imports sqlalchemy, ator.jsonenc, ator.store.*).

Outbound: `webhook_endpoints` (an org's receivers, secret encrypted), `webhook_events` (the
outbox: one row per event, its body the exact bytes every attempt signs), one
`webhook_deliveries` row per (endpoint, event) and its `webhook_attempts` log. The
`TurnEndedOutbox` step part writes a `turn.ended` event *and* the job that fans it out inside
the turn's final statement, so both exist if and only if the turn's end committed.

Inbound: `webhook_inbound` (an org's receiving endpoints: target thread, mapping, secret) and
`webhook_received` (every accepted request, raw, unique per endpoint and webhook id).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.database import Connection, Database, first
from ator.store.jobs import CHANNEL
from ator.store.parts import PartSql
from ator.store.scope import Scope

__all__ = [
    "Attempt",
    "Delivery",
    "Endpoint",
    "Inbound",
    "Received",
    "TurnEndedOutbox",
    "create_endpoint",
    "create_inbound",
    "delete_endpoint",
    "disable_endpoint",
    "fan_out",
    "finish_delivery",
    "get_delivery",
    "get_endpoint",
    "get_inbound",
    "get_received",
    "inbound_by_id",
    "insert_event",
    "insert_test_delivery",
    "list_attempts",
    "list_deliveries",
    "list_endpoints",
    "mark_health",
    "record_attempt",
    "reopen_delivery",
    "reopen_range",
    "rotate_secret",
    "set_mapping",
    "set_received",
    "store_received",
]


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: UUID
    org_id: UUID
    url: str
    description: str
    event_types: list[str]
    secret_nonce: bytes
    secret_ct: bytes
    enabled: bool
    disabled_reason: str | None
    created_at: datetime
    previous_nonce: bytes | None = None
    previous_ct: bytes | None = None
    previous_until: datetime | None = None
    failing_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    id: UUID
    org_id: UUID
    endpoint_id: UUID
    event_id: UUID
    event_type: str
    status: str
    attempts: int
    last_status: int | None
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    status_code: int | None
    latency_ms: int
    error: str | None
    response_excerpt: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Inbound:
    id: UUID
    org_id: UUID
    name: str
    thread_id: UUID
    mapping: dict[str, Any]
    secret_nonce: bytes
    secret_ct: bytes
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Received:
    id: UUID
    org_id: UUID
    endpoint_id: UUID
    webhook_id: str
    body: bytes
    status: str
    error: str | None
    created_at: datetime


def _endpoint(r: Any) -> Endpoint:
    return Endpoint(r["id"], r["org_id"], r["url"], r["description"], list(r["event_types"]),
                    bytes(r["secret_nonce"]), bytes(r["secret_ct"]), r["enabled"],
                    r["disabled_reason"], r["created_at"],
                    bytes(r["previous_nonce"]) if r["previous_nonce"] is not None else None,
                    bytes(r["previous_ct"]) if r["previous_ct"] is not None else None,
                    r["previous_until"], r["failing_since"])


def _delivery(r: Any) -> Delivery:
    return Delivery(r["id"], r["org_id"], r["endpoint_id"], r["event_id"], r["type"],
                    r["status"], r["attempts"], r["last_status"], r["created_at"],
                    r["finished_at"])


def _inbound(r: Any) -> Inbound:
    return Inbound(r["id"], r["org_id"], r["name"], r["thread_id"], r["mapping"],
                   bytes(r["secret_nonce"]), bytes(r["secret_ct"]), r["created_at"])


def _received(r: Any) -> Received:
    return Received(r["id"], r["org_id"], r["endpoint_id"], r["webhook_id"], bytes(r["body"]),
                    r["status"], r["error"], r["created_at"])


# --- outbound endpoints -------------------------------------------------------------------

_CREATE_ENDPOINT = sa.text("""
INSERT INTO webhook_endpoints (id, org_id, url, description, event_types, secret_nonce,
                               secret_ct)
VALUES (:id, :org_id, :url, :description, CAST(:event_types AS text[]), :nonce, :ct)
RETURNING *""")


async def create_endpoint(db: Database, scope: Scope, *, url: str, description: str,
                          event_types: list[str], nonce: bytes, ct: bytes) -> Endpoint:
    rows = await db.fetch(_CREATE_ENDPOINT, {
        "id": uuid.uuid4(), "org_id": scope.org_id, "url": url, "description": description,
        "event_types": event_types, "nonce": nonce, "ct": ct}, write=True)
    return _endpoint(rows[0])


_LIST_ENDPOINTS = sa.text(
    "SELECT * FROM webhook_endpoints WHERE org_id = :org_id ORDER BY created_at, id")
_GET_ENDPOINT = sa.text("SELECT * FROM webhook_endpoints WHERE id = :id AND org_id = :org_id")
_DELETE_ENDPOINT = sa.text(
    "DELETE FROM webhook_endpoints WHERE id = :id AND org_id = :org_id RETURNING id")
_DISABLE_ENDPOINT = sa.text("""
UPDATE webhook_endpoints SET enabled = false, disabled_reason = :reason
 WHERE id = :id AND org_id = :org_id""")


async def list_endpoints(db: Database, scope: Scope) -> list[Endpoint]:
    return [_endpoint(r) for r in await db.fetch(_LIST_ENDPOINTS, {"org_id": scope.org_id},
                                                 write=False)]


async def get_endpoint(db: Database, scope: Scope, endpoint_id: UUID) -> Endpoint | None:
    rows = await db.fetch(_GET_ENDPOINT, {"id": endpoint_id, "org_id": scope.org_id},
                          write=False)
    return _endpoint(rows[0]) if rows else None


async def delete_endpoint(db: Database, scope: Scope, endpoint_id: UUID) -> bool:
    return bool(await db.fetch(_DELETE_ENDPOINT, {"id": endpoint_id, "org_id": scope.org_id},
                               write=True))


async def disable_endpoint(db: Database, scope: Scope, endpoint_id: UUID, reason: str) -> None:
    await db.fetch(_DISABLE_ENDPOINT, {"id": endpoint_id, "org_id": scope.org_id,
                                       "reason": reason}, write=True)


_ROTATE = sa.text("""
UPDATE webhook_endpoints
   SET previous_nonce = secret_nonce, previous_ct = secret_ct,
       previous_until = now() + make_interval(secs => :overlap),
       secret_nonce = :nonce, secret_ct = :ct
 WHERE id = :id AND org_id = :org_id
RETURNING *""")


async def rotate_secret(db: Database, scope: Scope, endpoint_id: UUID, *, nonce: bytes,
                        ct: bytes, overlap: float) -> Endpoint | None:
    """A new secret; the old one keeps signing for `overlap` seconds. None: not this org's."""
    rows = await db.fetch(_ROTATE, {"id": endpoint_id, "org_id": scope.org_id, "nonce": nonce,
                                    "ct": ct, "overlap": float(overlap)}, write=True)
    return _endpoint(rows[0]) if rows else None


# --- the outbox ---------------------------------------------------------------------------

# The `turn.ended` event and its fan-out job, written by a turn's final statement only when
# the turn is still running (`_turn` has its row) and the org has an enabled endpoint that
# wants the type. A turn that did not commit leaves neither.
_TURN_ENDED = PartSql("webhooks.turn_ended", ctes=("""_wh_event AS (
  INSERT INTO webhook_events (id, org_id, type, body)
  SELECT :event_id, :org_id, 'turn.ended', :body
   WHERE EXISTS (SELECT 1 FROM _turn)
     AND EXISTS (SELECT 1 FROM webhook_endpoints w
                  WHERE w.org_id = :org_id AND w.enabled
                    AND (cardinality(w.event_types) = 0 OR 'turn.ended' = ANY(w.event_types)))
  RETURNING id
)""", """_wh_job AS (
  INSERT INTO jobs (org_id, kind, payload, max_attempts)
  SELECT :org_id, :kind, jsonb_build_object('event_id', id), :attempts FROM _wh_event
  RETURNING id
)"""), selects=(f"(SELECT count(pg_notify('{CHANNEL}', '')) FROM _wh_job) AS webhook_jobs",),
    params=frozenset({"event_id", "body", "kind", "attempts"}))


@dataclass(frozen=True, slots=True)
class TurnEndedOutbox:
    """A step part of a turn's final write: the `turn.ended` outbox row and its job."""

    event_id: UUID
    body: str
    job_kind: str
    max_attempts: int
    sql: ClassVar[PartSql] = _TURN_ENDED

    def values(self) -> dict[str, Any]:
        return {"event_id": self.event_id, "body": self.body, "kind": self.job_kind,
                "attempts": self.max_attempts}


_EVENT = sa.text("""
INSERT INTO webhook_events (id, org_id, type, body)
SELECT :event_id, :org_id, :type, :body
 WHERE EXISTS (SELECT 1 FROM webhook_endpoints w
                WHERE w.org_id = :org_id AND w.enabled
                  AND (cardinality(w.event_types) = 0 OR :type = ANY(w.event_types)))
RETURNING id""")


async def insert_event(conn: Connection, scope: Scope, event_id: UUID, type: str,
                       body: str) -> bool:
    """An outbox event of `type`, on the caller's transaction, only when some enabled
    endpoint of the org wants it (the caller then queues its fan-out). True: written."""
    rows = (await conn.execute(_EVENT, {"event_id": event_id, "org_id": scope.org_id,
                                        "type": type, "body": body})).all()
    return bool(rows)


_FAN_OUT = sa.text("""
INSERT INTO webhook_deliveries (id, org_id, endpoint_id, event_id)
SELECT gen_random_uuid(), e.org_id, w.id, e.id
  FROM webhook_events e
  JOIN webhook_endpoints w ON w.org_id = e.org_id AND w.enabled
       AND (cardinality(w.event_types) = 0 OR e.type = ANY(w.event_types))
 WHERE e.id = :event_id AND e.org_id = :org_id
ON CONFLICT ON CONSTRAINT uq_webhook_deliveries_endpoint_event DO NOTHING
RETURNING id""")


async def fan_out(conn: Connection, scope: Scope, event_id: UUID) -> list[UUID]:
    """One delivery per enabled endpoint that wants the event (on the caller's transaction);
    returns the new deliveries' ids (none twice)."""
    rows = (await conn.execute(_FAN_OUT, {"event_id": event_id,
                                          "org_id": scope.org_id})).all()
    return [r["id"] for r in rows]


_TEST_DELIVERY = sa.text("""
WITH w AS (SELECT id FROM webhook_endpoints WHERE id = :endpoint_id AND org_id = :org_id),
ev AS (
  INSERT INTO webhook_events (id, org_id, type, body)
  SELECT :event_id, :org_id, 'webhook.test', :body FROM w RETURNING id)
INSERT INTO webhook_deliveries (id, org_id, endpoint_id, event_id)
SELECT gen_random_uuid(), :org_id, w.id, ev.id FROM w, ev
RETURNING id""")


async def insert_test_delivery(conn: Connection, scope: Scope, endpoint_id: UUID, event_id: UUID,
                        body: str) -> UUID | None:
    """A `webhook.test` event and its delivery to this one endpoint (whatever its filters),
    on the caller's transaction. None: not this org's endpoint."""
    row = first((await conn.execute(_TEST_DELIVERY, {
        "endpoint_id": endpoint_id, "org_id": scope.org_id, "event_id": event_id,
        "body": body})).all())
    return row["id"] if row is not None else None


# --- deliveries and their log -------------------------------------------------------------

_DELIVERY_COLUMNS = """d.id, d.org_id, d.endpoint_id, d.event_id, e.type, d.status, d.attempts,
       d.last_status, d.created_at, d.finished_at"""
_GET_DELIVERY = sa.text(f"""
SELECT {_DELIVERY_COLUMNS}, e.body, e.created_at AS event_at
  FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
 WHERE d.id = :id AND d.org_id = :org_id""")
_LIST_DELIVERIES = sa.text(f"""
SELECT {_DELIVERY_COLUMNS}
  FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
 WHERE d.endpoint_id = :endpoint_id AND d.org_id = :org_id
 ORDER BY d.created_at DESC, d.id LIMIT :limit""")
_RECORD_ATTEMPT = sa.text("""
WITH d AS (
  UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = :status_code
   WHERE id = :id AND org_id = :org_id RETURNING id, attempts)
INSERT INTO webhook_attempts (org_id, delivery_id, attempt, status_code, latency_ms, error,
                              response_excerpt)
SELECT :org_id, d.id, d.attempts, :status_code, :latency_ms, :error, :excerpt FROM d
RETURNING attempt""")
_FINISH_DELIVERY = sa.text("""
UPDATE webhook_deliveries SET status = :status, finished_at = now()
 WHERE id = :id AND org_id = :org_id""")
_REOPEN_DELIVERY = sa.text("""
UPDATE webhook_deliveries SET status = 'pending', finished_at = NULL
 WHERE id = :id AND org_id = :org_id AND status <> 'pending' RETURNING id""")
_LIST_ATTEMPTS = sa.text("""
SELECT attempt, status_code, latency_ms, error, response_excerpt, created_at
  FROM webhook_attempts WHERE delivery_id = :id AND org_id = :org_id ORDER BY attempt""")


async def get_delivery(db: Database, scope: Scope,
                       delivery_id: UUID) -> tuple[Delivery, str] | None:
    """The delivery and its event's body, or None (another org's is None too)."""
    rows = await db.fetch(_GET_DELIVERY, {"id": delivery_id, "org_id": scope.org_id},
                          write=False)
    return (_delivery(rows[0]), rows[0]["body"]) if rows else None


async def list_deliveries(db: Database, scope: Scope, endpoint_id: UUID, *,
                          limit: int = 100) -> list[Delivery]:
    return [_delivery(r) for r in await db.fetch(_LIST_DELIVERIES, {
        "endpoint_id": endpoint_id, "org_id": scope.org_id, "limit": limit}, write=False)]


async def record_attempt(db: Database, scope: Scope, delivery_id: UUID, *,
                         status_code: int | None, latency_ms: int, error: str | None,
                         excerpt: str | None) -> int:
    """Log one attempt (numbered across replays); returns its number."""
    rows = await db.fetch(_RECORD_ATTEMPT, {
        "id": delivery_id, "org_id": scope.org_id, "status_code": status_code,
        "latency_ms": latency_ms, "error": error, "excerpt": excerpt}, write=True)
    return int(rows[0]["attempt"]) if rows else 0


async def finish_delivery(db: Database, scope: Scope, delivery_id: UUID, status: str) -> None:
    await db.fetch(_FINISH_DELIVERY, {"id": delivery_id, "org_id": scope.org_id,
                                      "status": status}, write=True)


async def reopen_delivery(conn: Connection, scope: Scope, delivery_id: UUID) -> bool:
    """Back to pending for a replay (on the caller's transaction); False when it is pending."""
    return bool((await conn.execute(_REOPEN_DELIVERY, {"id": delivery_id,
                                                       "org_id": scope.org_id})).all())


_HEALTH = sa.text("""
UPDATE webhook_endpoints
   SET failing_since = CASE WHEN :ok THEN NULL ELSE COALESCE(failing_since, now()) END,
       enabled = enabled AND (:ok OR COALESCE(failing_since, now())
                              > now() - make_interval(secs => :disable_after)),
       disabled_reason = CASE
         WHEN enabled AND NOT :ok
              AND COALESCE(failing_since, now()) <= now() - make_interval(secs => :disable_after)
         THEN 'every attempt failed since '
              || to_char(COALESCE(failing_since, now()) AT TIME ZONE 'UTC',
                         'YYYY-MM-DD"T"HH24:MI:SS"Z"')
         ELSE disabled_reason END
 WHERE id = :id AND org_id = :org_id
RETURNING enabled""")


async def mark_health(db: Database, scope: Scope, endpoint_id: UUID, *, ok: bool,
                      disable_after: float) -> bool:
    """Note an attempt's outcome on its endpoint: a success clears `failing_since`, a
    failure starts it; failing for `disable_after` seconds disables the endpoint. Returns
    whether the endpoint is still enabled."""
    rows = await db.fetch(_HEALTH, {"id": endpoint_id, "org_id": scope.org_id, "ok": ok,
                                    "disable_after": float(disable_after)}, write=True)
    return bool(rows and rows[0]["enabled"])


_REOPEN_RANGE = sa.text("""
UPDATE webhook_deliveries SET status = 'pending', finished_at = NULL
 WHERE id IN (SELECT id FROM webhook_deliveries
               WHERE endpoint_id = :endpoint_id AND org_id = :org_id AND status = 'failed'
                 AND created_at >= :since AND created_at < :until
               ORDER BY created_at LIMIT :limit)
RETURNING id""")


async def reopen_range(conn: Connection, scope: Scope, endpoint_id: UUID, *, since: datetime,
                       until: datetime, limit: int) -> list[UUID]:
    """Back to pending: the endpoint's failed deliveries made in [since, until), at most
    `limit` (oldest first), on the caller's transaction."""
    rows = (await conn.execute(_REOPEN_RANGE, {
        "endpoint_id": endpoint_id, "org_id": scope.org_id, "since": since, "until": until,
        "limit": limit})).all()
    return [r["id"] for r in rows]


async def list_attempts(db: Database, scope: Scope, delivery_id: UUID) -> list[Attempt]:
    return [Attempt(r["attempt"], r["status_code"], r["latency_ms"], r["error"],
                    r["response_excerpt"], r["created_at"])
            for r in await db.fetch(_LIST_ATTEMPTS, {"id": delivery_id,
                                                     "org_id": scope.org_id}, write=False)]


# --- inbound ------------------------------------------------------------------------------

_CREATE_INBOUND = sa.text("""
INSERT INTO webhook_inbound (id, org_id, name, thread_id, mapping, secret_nonce, secret_ct)
SELECT :id, t.org_id, :name, t.id, CAST(:mapping AS jsonb), :nonce, :ct
  FROM threads t WHERE t.id = :thread_id AND t.org_id = :org_id AND t.deleted_at IS NULL
RETURNING *""")
_GET_INBOUND = sa.text("SELECT * FROM webhook_inbound WHERE id = :id AND org_id = :org_id")
_INBOUND_BY_ID = sa.text("SELECT * FROM webhook_inbound WHERE id = :id")
_STORE_RECEIVED = sa.text("""
INSERT INTO webhook_received (id, org_id, endpoint_id, webhook_id, headers, body)
VALUES (:id, :org_id, :endpoint_id, :webhook_id, CAST(:headers AS jsonb), :body)
ON CONFLICT ON CONSTRAINT uq_webhook_received_endpoint_id DO NOTHING
RETURNING id""")
_GET_RECEIVED = sa.text("SELECT * FROM webhook_received WHERE id = :id AND org_id = :org_id")
_SET_RECEIVED = sa.text("""
UPDATE webhook_received SET status = :status, error = :error
 WHERE id = :id AND org_id = :org_id""")


async def create_inbound(db: Database, scope: Scope, *, name: str, thread_id: UUID,
                         mapping: dict[str, Any], nonce: bytes, ct: bytes) -> Inbound | None:
    """None when the thread is not this org's."""
    rows = await db.fetch(_CREATE_INBOUND, {
        "id": uuid.uuid4(), "org_id": scope.org_id, "name": name, "thread_id": thread_id,
        "mapping": jsonenc.dumps(mapping), "nonce": nonce, "ct": ct}, write=True)
    return _inbound(rows[0]) if rows else None


async def get_inbound(db: Database, scope: Scope, inbound_id: UUID) -> Inbound | None:
    rows = await db.fetch(_GET_INBOUND, {"id": inbound_id, "org_id": scope.org_id},
                          write=False)
    return _inbound(rows[0]) if rows else None


async def inbound_by_id(db: Database, inbound_id: UUID) -> Inbound | None:
    """The endpoint a request to /v1/hooks/{id} names: unscoped, because the caller is the
    outside sender, authenticated by the endpoint's own secret."""
    rows = await db.fetch(_INBOUND_BY_ID, {"id": inbound_id}, write=False)
    return _inbound(rows[0]) if rows else None


async def store_received(conn: Connection, endpoint: Inbound, *, webhook_id: str,
                         headers: dict[str, str], body: bytes) -> UUID | None:
    """Keep a request raw (on the caller's transaction); None when this webhook id was
    already received by the endpoint."""
    row = first((await conn.execute(_STORE_RECEIVED, {
        "id": uuid.uuid4(), "org_id": endpoint.org_id, "endpoint_id": endpoint.id,
        "webhook_id": webhook_id, "headers": jsonenc.dumps(headers), "body": body})).all())
    return row["id"] if row is not None else None


async def get_received(db: Database, scope: Scope, received_id: UUID) -> Received | None:
    rows = await db.fetch(_GET_RECEIVED, {"id": received_id, "org_id": scope.org_id},
                          write=False)
    return _received(rows[0]) if rows else None


async def set_received(db: Database, scope: Scope, received_id: UUID, status: str,
                       error: str | None = None) -> None:
    await db.fetch(_SET_RECEIVED, {"id": received_id, "org_id": scope.org_id,
                                   "status": status, "error": error}, write=True)


_SET_MAPPING = sa.text("""
UPDATE webhook_inbound SET mapping = CAST(:mapping AS jsonb)
 WHERE id = :id AND org_id = :org_id""")


async def set_mapping(db: Database, scope: Scope, inbound_id: UUID,
                      mapping: dict[str, Any]) -> None:
    await db.fetch(_SET_MAPPING, {"id": inbound_id, "org_id": scope.org_id,
                                  "mapping": jsonenc.dumps(mapping)}, write=True)
