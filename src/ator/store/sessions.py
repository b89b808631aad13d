"""Console sessions (layer: store; imports store.database, store.records).

A session row holds the hash of its token, the API key it was exchanged for, its expiry and
its revocation. Who it stands for is read through the key at every lookup, so revoking the
key (or changing nothing else) ends every session made from it: there is no copy of the
role to go stale.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from uuid import UUID

import sqlalchemy as sa

from ator.store.database import Database, first
from ator.store.records import Principal

__all__ = ["create_session", "revoke_session", "session_principal"]

# A login also clears the key's sessions that ended over a day ago, so rows stay bounded by
# the logins of the last day (in the same statement: no extra round trip).
_CREATE = sa.text("""
WITH gone AS (
  DELETE FROM sessions
   WHERE key_id = :key_id
     AND (expires_at < now() - interval '1 day' OR revoked_at < now() - interval '1 day')
)
INSERT INTO sessions (id, org_id, key_id, hash, expires_at)
SELECT :id, k.org_id, k.id, :hash, now() + make_interval(secs => :ttl)
  FROM api_keys k
 WHERE k.id = :key_id AND k.revoked_at IS NULL
RETURNING expires_at
""")

_LOOKUP = sa.text("""
SELECT k.id, k.org_id, k.user_id, k.role, s.expires_at,
       COALESCE((o.settings ->> 'operator')::boolean, false) AS operator
  FROM sessions s
  JOIN api_keys k ON k.id = s.key_id AND k.org_id = s.org_id
  JOIN orgs o ON o.id = k.org_id
 WHERE s.hash = :hash AND s.revoked_at IS NULL AND s.expires_at > now()
   AND k.revoked_at IS NULL
""")

_REVOKE = sa.text("""
UPDATE sessions SET revoked_at = now()
 WHERE hash = :hash AND revoked_at IS NULL
RETURNING id
""")


async def create_session(db: Database, key_id: UUID, token_hash: str, ttl: float
                         ) -> datetime | None:
    """Store a session for an unrevoked key; its expiry, or None if the key is gone."""
    row = first(await db.write(_CREATE, {"id": uuid.uuid4(), "hash": token_hash,
                                         "ttl": float(ttl), "key_id": key_id}))
    return None if row is None else row.expires_at


async def session_principal(db: Database, token_hash: str
                            ) -> tuple[Principal, datetime] | None:
    """The principal of a live session (unexpired, unrevoked, its key unrevoked)."""
    row = first(await db.read(_LOOKUP, {"hash": token_hash}))
    if row is None:
        return None
    return Principal(row.org_id, row.user_id, row.role, row.id, bool(row.operator)), \
        row.expires_at


async def revoke_session(db: Database, token_hash: str) -> bool:
    return first(await db.write(_REVOKE, {"hash": token_hash})) is not None
