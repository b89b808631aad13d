"""Outbound webhook rows and statements (layer: store; imports sqlalchemy, ator.store.*).

`webhook_endpoints` (an org's receivers, secret encrypted), `webhook_events` (the outbox: one
row per event, its body the exact bytes every attempt signs), one `webhook_deliveries` row
per (endpoint, event) and its `webhook_attempts` log.

Every event is written in the transaction of what it reports, with the job that fans it out,
and only when an enabled endpoint of the org wants its type (`store/webhook_outbox.py`).
Inbound rows are `store/webhook_inbound.py`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, overload
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Connection, Database, first
from ator.store.scope import Scope

__all__ = [
    "Attempt",
    "Delivery",
    "Endpoint",
    "create_endpoint",
    "delete_endpoint",
    "disable_endpoint",
    "enable_endpoint",
    "fan_out",
    "finish_delivery",
    "get_delivery",
    "get_endpoint",
    "insert_test_delivery",
    "list_attempts",
    "list_deliveries",
    "list_endpoints",
    "mark_health",
    "record_attempt",
    "reopen_delivery",
    "reopen_range",
    "rotate_secret",
    "update_endpoint",
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
    disabled_at: datetime | None = None


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


def _endpoint(r: Any) -> Endpoint:
    return Endpoint(r["id"], r["org_id"], r["url"], r["description"], list(r["event_types"]),
                    bytes(r["secret_nonce"]), bytes(r["secret_ct"]), r["enabled"],
                    r["disabled_reason"], r["created_at"],
                    bytes(r["previous_nonce"]) if r["previous_nonce"] is not None else None,
                    bytes(r["previous_ct"]) if r["previous_ct"] is not None else None,
                    r["previous_until"], r["failing_since"], r["disabled_at"])


def _delivery(r: Any) -> Delivery:
    return Delivery(r["id"], r["org_id"], r["endpoint_id"], r["event_id"], r["type"],
                    r["status"], r["attempts"], r["last_status"], r["created_at"],
                    r["finished_at"])


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
UPDATE webhook_endpoints SET enabled = false, disabled_reason = :reason, disabled_at = now()
 WHERE id = :id AND org_id = :org_id AND enabled RETURNING *""")
_ENABLE_ENDPOINT = sa.text("""
UPDATE webhook_endpoints SET enabled = true, disabled_reason = NULL, disabled_at = NULL,
       failing_since = NULL
 WHERE id = :id AND org_id = :org_id RETURNING *""")
_UPDATE_ENDPOINT = sa.text("""
UPDATE webhook_endpoints
   SET url = COALESCE(:url, url), description = COALESCE(:description, description),
       event_types = COALESCE(CAST(:event_types AS text[]), event_types)
 WHERE id = :id AND org_id = :org_id RETURNING *""")


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


async def disable_endpoint(conn: Connection, scope: Scope, endpoint_id: UUID,
                           reason: str) -> Endpoint | None:
    """Disable it (on the caller's transaction); the endpoint, or None when it was not
    enabled (or is not this org's)."""
    row = (await conn.execute(_DISABLE_ENDPOINT, {"id": endpoint_id, "org_id": scope.org_id,
                                                  "reason": reason})).first()
    return _endpoint(row) if row is not None else None


async def enable_endpoint(db: Database, scope: Scope, endpoint_id: UUID) -> Endpoint | None:
    """Enabled again, its failure clock cleared. None: not this org's."""
    rows = await db.fetch(_ENABLE_ENDPOINT, {"id": endpoint_id, "org_id": scope.org_id},
                          write=True)
    return _endpoint(rows[0]) if rows else None


async def update_endpoint(db: Database, scope: Scope, endpoint_id: UUID, *,
                          url: str | None = None, description: str | None = None,
                          event_types: list[str] | None = None) -> Endpoint | None:
    """Change what is given. None: not this org's."""
    rows = await db.fetch(_UPDATE_ENDPOINT, {
        "id": endpoint_id, "org_id": scope.org_id, "url": url, "description": description,
        "event_types": event_types}, write=True)
    return _endpoint(rows[0]) if rows else None


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


_DELIVERY_TARGET = sa.text(f"""
SELECT {_DELIVERY_COLUMNS}, e.body, w.id AS w_id, w.url AS w_url,
       w.description AS w_description, w.event_types AS w_event_types,
       w.secret_nonce AS w_secret_nonce, w.secret_ct AS w_secret_ct, w.enabled AS w_enabled,
       w.disabled_reason AS w_disabled_reason, w.created_at AS w_created_at,
       w.previous_nonce AS w_previous_nonce, w.previous_ct AS w_previous_ct,
       w.previous_until AS w_previous_until, w.failing_since AS w_failing_since,
       w.disabled_at AS w_disabled_at, w.org_id AS w_org_id
  FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
  LEFT JOIN webhook_endpoints w ON w.id = d.endpoint_id
 WHERE d.id = :id AND d.org_id = :org_id""")


@overload
async def get_delivery(db: Database, scope: Scope, delivery_id: UUID) -> tuple[
    Delivery, str] | None: ...


@overload
async def get_delivery(db: Database, scope: Scope, delivery_id: UUID, *,
                       with_endpoint: Literal[True]) -> tuple[
    Delivery, str, Endpoint | None] | None: ...


async def get_delivery(db: Database, scope: Scope, delivery_id: UUID, *,
                       with_endpoint: bool = False) -> Any:
    """The delivery and its event's body (and, `with_endpoint`, its endpoint, in the same
    statement), or None (another org's is None too)."""
    if not with_endpoint:
        rows = await db.fetch(_GET_DELIVERY, {"id": delivery_id, "org_id": scope.org_id},
                              write=False)
        return (_delivery(rows[0]), rows[0]["body"]) if rows else None
    rows = await db.fetch(_DELIVERY_TARGET, {"id": delivery_id, "org_id": scope.org_id},
                          write=False)
    if not rows:
        return None
    r = rows[0]
    endpoint = None if r["w_id"] is None else _endpoint(
        {k[2:]: v for k, v in r.items() if k.startswith("w_")})
    return _delivery(r), r["body"], endpoint


async def list_deliveries(db: Database, scope: Scope, endpoint_id: UUID, *,
                          limit: int = 100) -> list[Delivery]:
    return [_delivery(r) for r in await db.fetch(_LIST_DELIVERIES, {
        "endpoint_id": endpoint_id, "org_id": scope.org_id, "limit": limit}, write=False)]


async def record_attempt(conn: Connection, scope: Scope, delivery_id: UUID, *,
                         status_code: int | None, latency_ms: int, error: str | None,
                         excerpt: str | None) -> int:
    """Log one attempt (numbered across replays) on the caller's transaction; returns its
    number."""
    row = (await conn.execute(_RECORD_ATTEMPT, {
        "id": delivery_id, "org_id": scope.org_id, "status_code": status_code,
        "latency_ms": latency_ms, "error": error, "excerpt": excerpt})).first()
    return int(row["attempt"]) if row is not None else 0


async def finish_delivery(conn: Connection, scope: Scope, delivery_id: UUID,
                          status: str) -> None:
    await conn.execute(_FINISH_DELIVERY, {"id": delivery_id, "org_id": scope.org_id,
                                          "status": status})


async def reopen_delivery(conn: Connection, scope: Scope, delivery_id: UUID) -> bool:
    """Back to pending for a replay (on the caller's transaction); False when it is pending."""
    return bool((await conn.execute(_REOPEN_DELIVERY, {"id": delivery_id,
                                                       "org_id": scope.org_id})).all())


_HEALTH = sa.text("""
WITH old AS (SELECT enabled FROM webhook_endpoints WHERE id = :id AND org_id = :org_id
              FOR NO KEY UPDATE)
UPDATE webhook_endpoints
   SET failing_since = CASE WHEN :ok THEN NULL ELSE COALESCE(failing_since, now()) END,
       disabled_at = CASE
         WHEN enabled AND NOT :ok
              AND COALESCE(failing_since, now()) <= now() - make_interval(secs => :disable_after)
         THEN now() ELSE disabled_at END,
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
RETURNING *, (SELECT enabled FROM old) AS was_enabled""")


async def mark_health(conn: Connection, scope: Scope, endpoint_id: UUID, *, ok: bool,
                      disable_after: float) -> tuple[Endpoint | None, bool]:
    """Note an attempt's outcome on its endpoint (on the caller's transaction): a success
    clears `failing_since`, a failure starts it; failing for `disable_after` seconds
    disables the endpoint. Returns the endpoint and whether this call disabled it."""
    row = (await conn.execute(_HEALTH, {"id": endpoint_id, "org_id": scope.org_id, "ok": ok,
                                        "disable_after": float(disable_after)})).first()
    if row is None:
        return None, False
    return _endpoint(row), bool(row["was_enabled"]) and not row["enabled"]


_REOPEN_RANGE = sa.text("""
UPDATE webhook_deliveries SET status = 'pending', finished_at = NULL
 WHERE id IN (SELECT id FROM webhook_deliveries
               WHERE endpoint_id = :endpoint_id AND org_id = :org_id AND status = 'failed'
                 AND created_at >= :since AND created_at < :until
               ORDER BY created_at LIMIT :limit)
RETURNING id""")


_LOCK_ENDPOINT = sa.text("""
SELECT id FROM webhook_endpoints WHERE id = :id AND org_id = :org_id FOR NO KEY UPDATE""")


async def reopen_range(conn: Connection, scope: Scope, endpoint_id: UUID, *, since: datetime,
                       until: datetime, limit: int) -> list[UUID] | None:
    """Back to pending: the endpoint's failed deliveries made in [since, until), at most
    `limit` (oldest first), on the caller's transaction. None: not this org's endpoint.
    The endpoint's row is locked first, as a delete takes it before its deliveries'."""
    if (await conn.execute(_LOCK_ENDPOINT, {"id": endpoint_id,
                                            "org_id": scope.org_id})).first() is None:
        return None
    rows = (await conn.execute(_REOPEN_RANGE, {
        "endpoint_id": endpoint_id, "org_id": scope.org_id, "since": since, "until": until,
        "limit": limit})).all()
    return [r["id"] for r in rows]


async def list_attempts(db: Database, scope: Scope, delivery_id: UUID) -> list[Attempt]:
    return [Attempt(r["attempt"], r["status_code"], r["latency_ms"], r["error"],
                    r["response_excerpt"], r["created_at"])
            for r in await db.fetch(_LIST_ATTEMPTS, {"id": delivery_id,
                                                     "org_id": scope.org_id}, write=False)]
