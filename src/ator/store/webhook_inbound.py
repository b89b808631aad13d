"""Inbound webhook rows and statements (layer: store; imports sqlalchemy, ator.jsonenc,
ator.store.*).

`webhook_inbound`: an org's receiving endpoints (verification method, sealed secret, size
limit, mapping; `thread_id` is the fixed thread of a mapping that names one).
`webhook_received`: every accepted request, raw, unique per endpoint and webhook id, with
what it became (`result`) or why it failed (`error`). `webhook_threads`: the thread each
mapping key reached first, so the same key reaches the same thread.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator import jsonenc
from ator.store.database import Connection, Database, first
from ator.store.scope import Scope

__all__ = [
    "Inbound",
    "Received",
    "create_inbound",
    "delete_inbound",
    "get_inbound",
    "get_received",
    "inbound_by_id",
    "list_inbound",
    "list_received",
    "lock_key",
    "remember_thread",
    "set_received",
    "store_received",
    "thread_for_key",
    "update_inbound",
]


@dataclass(frozen=True, slots=True)
class Inbound:
    id: UUID
    org_id: UUID
    name: str
    thread_id: UUID | None
    mapping: dict[str, Any]
    secret_nonce: bytes
    secret_ct: bytes
    created_at: datetime
    verification: dict[str, Any]
    max_bytes: int | None


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
    headers: dict[str, str]
    result: dict[str, Any] | None


def _inbound(r: Any) -> Inbound:
    return Inbound(r["id"], r["org_id"], r["name"], r["thread_id"], r["mapping"],
                   bytes(r["secret_nonce"]), bytes(r["secret_ct"]), r["created_at"],
                   r["verification"], r["max_bytes"])


def _received(r: Any) -> Received:
    return Received(r["id"], r["org_id"], r["endpoint_id"], r["webhook_id"], bytes(r["body"]),
                    r["status"], r["error"], r["created_at"], r["headers"], r["result"])


# A fixed thread must be this org's and not in the trash; the statement writes nothing
# otherwise (the caller answers 404).
_CREATE_INBOUND = sa.text("""
INSERT INTO webhook_inbound (id, org_id, name, thread_id, mapping, verification, max_bytes,
                             secret_nonce, secret_ct)
SELECT :id, :org_id, :name, :thread_id, CAST(:mapping AS jsonb), CAST(:verification AS jsonb),
       :max_bytes, :nonce, :ct
 WHERE CAST(:thread_id AS uuid) IS NULL
    OR EXISTS (SELECT 1 FROM threads t WHERE t.id = :thread_id AND t.org_id = :org_id
                                         AND t.deleted_at IS NULL)
RETURNING *""")
_UPDATE_INBOUND = sa.text("""
UPDATE webhook_inbound
   SET name = COALESCE(:name, name), mapping = COALESCE(CAST(:mapping AS jsonb), mapping),
       thread_id = CASE WHEN CAST(:mapping AS jsonb) IS NULL THEN thread_id ELSE :thread_id END,
       max_bytes = CASE WHEN :set_max THEN :max_bytes ELSE max_bytes END
 WHERE id = :id AND org_id = :org_id
   AND (CAST(:thread_id AS uuid) IS NULL
        OR EXISTS (SELECT 1 FROM threads t WHERE t.id = :thread_id AND t.org_id = :org_id
                                             AND t.deleted_at IS NULL))
RETURNING *""")
_GET_INBOUND = sa.text("SELECT * FROM webhook_inbound WHERE id = :id AND org_id = :org_id")
_LIST_INBOUND = sa.text(
    "SELECT * FROM webhook_inbound WHERE org_id = :org_id ORDER BY created_at, id")
_DELETE_INBOUND = sa.text(
    "DELETE FROM webhook_inbound WHERE id = :id AND org_id = :org_id RETURNING id")
_INBOUND_BY_ID = sa.text("SELECT * FROM webhook_inbound WHERE id = :id")
_STORE_RECEIVED = sa.text("""
INSERT INTO webhook_received (id, org_id, endpoint_id, webhook_id, headers, body)
VALUES (:id, :org_id, :endpoint_id, :webhook_id, CAST(:headers AS jsonb), :body)
ON CONFLICT ON CONSTRAINT uq_webhook_received_endpoint_id DO NOTHING
RETURNING id""")
_GET_RECEIVED = sa.text("SELECT * FROM webhook_received WHERE id = :id AND org_id = :org_id")
_LIST_RECEIVED = sa.text("""
SELECT * FROM webhook_received WHERE endpoint_id = :endpoint_id AND org_id = :org_id
 ORDER BY created_at DESC, id LIMIT :limit""")
_SET_RECEIVED = sa.text("""
UPDATE webhook_received SET status = :status, error = :error,
       result = CAST(:result AS jsonb)
 WHERE id = :id AND org_id = :org_id""")


async def create_inbound(db: Database, scope: Scope, *, name: str, thread_id: UUID | None,
                         mapping: dict[str, Any], verification: dict[str, Any],
                         max_bytes: int | None, nonce: bytes, ct: bytes) -> Inbound | None:
    """None when `thread_id` is not one of this org's live threads."""
    rows = await db.fetch(_CREATE_INBOUND, {
        "id": uuid.uuid4(), "org_id": scope.org_id, "name": name, "thread_id": thread_id,
        "mapping": jsonenc.dumps(mapping), "verification": jsonenc.dumps(verification),
        "max_bytes": max_bytes, "nonce": nonce, "ct": ct}, write=True)
    return _inbound(rows[0]) if rows else None


async def update_inbound(db: Database, scope: Scope, inbound_id: UUID, *,
                         name: str | None = None, mapping: dict[str, Any] | None = None,
                         thread_id: UUID | None = None, set_max: bool = False,
                         max_bytes: int | None = None) -> Inbound | None:
    """Change what is given (a new mapping brings its fixed thread). None when the endpoint
    or the fixed thread is not this org's."""
    rows = await db.fetch(_UPDATE_INBOUND, {
        "id": inbound_id, "org_id": scope.org_id, "name": name,
        "mapping": None if mapping is None else jsonenc.dumps(mapping),
        "thread_id": thread_id, "set_max": set_max, "max_bytes": max_bytes}, write=True)
    return _inbound(rows[0]) if rows else None


async def get_inbound(db: Database, scope: Scope, inbound_id: UUID) -> Inbound | None:
    rows = await db.fetch(_GET_INBOUND, {"id": inbound_id, "org_id": scope.org_id},
                          write=False)
    return _inbound(rows[0]) if rows else None


async def list_inbound(db: Database, scope: Scope) -> list[Inbound]:
    return [_inbound(r) for r in await db.fetch(_LIST_INBOUND, {"org_id": scope.org_id},
                                                write=False)]


async def delete_inbound(db: Database, scope: Scope, inbound_id: UUID) -> bool:
    return bool(await db.fetch(_DELETE_INBOUND, {"id": inbound_id, "org_id": scope.org_id},
                               write=True))


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


async def list_received(db: Database, scope: Scope, endpoint_id: UUID, *,
                        limit: int = 100) -> list[Received]:
    """Newest first."""
    return [_received(r) for r in await db.fetch(_LIST_RECEIVED, {
        "endpoint_id": endpoint_id, "org_id": scope.org_id, "limit": limit}, write=False)]


async def set_received(db: Database, scope: Scope, received_id: UUID, status: str,
                       error: str | None = None,
                       result: dict[str, Any] | None = None) -> None:
    await db.fetch(_SET_RECEIVED, {"id": received_id, "org_id": scope.org_id,
                                   "status": status, "error": error,
                                   "result": None if result is None else jsonenc.dumps(result)},
                   write=True)


# --- the thread a key reaches -------------------------------------------------------------

_LOCK_KEY = sa.text(
    "SELECT pg_advisory_xact_lock(hashtextextended(:lock, 0))")
_THREAD_FOR_KEY = sa.text("""
SELECT k.thread_id FROM webhook_threads k JOIN threads t ON t.id = k.thread_id
 WHERE k.endpoint_id = :endpoint_id AND k.key = :key AND t.deleted_at IS NULL""")
_REMEMBER = sa.text("""
INSERT INTO webhook_threads (endpoint_id, key, org_id, thread_id)
VALUES (:endpoint_id, :key, :org_id, :thread_id)
ON CONFLICT (endpoint_id, key) DO UPDATE SET thread_id = EXCLUDED.thread_id""")


async def lock_key(conn: Connection, endpoint_id: UUID, key: str) -> None:
    """Serialize, until the caller's transaction ends, everything done for one key."""
    await conn.execute(_LOCK_KEY, {"lock": f"webhook-key:{endpoint_id}:{key}"})


async def thread_for_key(conn: Connection, endpoint_id: UUID, key: str) -> UUID | None:
    """The live thread this key reached, if any (a trashed one is forgotten)."""
    row = (await conn.execute(_THREAD_FOR_KEY, {"endpoint_id": endpoint_id,
                                                "key": key})).first()
    return row["thread_id"] if row is not None else None


async def remember_thread(conn: Connection, scope: Scope, endpoint_id: UUID, key: str,
                          thread_id: UUID) -> None:
    await conn.execute(_REMEMBER, {"endpoint_id": endpoint_id, "key": key,
                                   "org_id": scope.org_id, "thread_id": thread_id})
