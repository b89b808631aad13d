"""API keys and the principals they stand for (layer: store; imports ator.security.keys).

Keys are stored hashed; `authenticate` is the one lookup the API does per request.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.errors import NotFound, ValidationFailed
from ator.security.keys import hash_key, new_key, parse_prefix
from ator.security.roles import ROLES
from ator.store.database import Database, first
from ator.store.records import ApiKey, Principal
from ator.store.schema import api_keys, users
from ator.store.scope import Scope

__all__ = [
    "ApiKey",
    "Principal",
    "any_key_exists",
    "authenticate",
    "create_key",
    "key_principal",
    "list_keys",
    "mark_operator",
    "revoke_key",
    "touch_key",
]


def _key(row: Any) -> ApiKey:
    return ApiKey(row.id, row.org_id, row.user_id, row.name, row.prefix, row.role,
                  row.revoked_at, row.last_used_at, row.created_at)


_AUTH = sa.text("""
UPDATE api_keys k SET last_used_at = now()
  FROM orgs o
 WHERE k.hash = :hash AND k.revoked_at IS NULL AND o.id = k.org_id
RETURNING k.id, k.org_id, k.user_id, k.role,
          COALESCE((o.settings ->> 'operator')::boolean, false) AS operator
""")


async def authenticate(db: Database, key: str) -> Principal | None:
    if parse_prefix(key) is None:
        return None
    row = first(await db.write(_AUTH, {"hash": hash_key(key)}))
    if row is None:
        return None
    return Principal(row.org_id, row.user_id, row.role, row.id, bool(row.operator))


_LOOKUP = sa.text("""
SELECT k.id, k.org_id, k.user_id, k.role,
       COALESCE((o.settings ->> 'operator')::boolean, false) AS operator,
       EXTRACT(EPOCH FROM now() - COALESCE(k.last_used_at, 'epoch'::timestamptz)) AS idle
  FROM api_keys k JOIN orgs o ON o.id = k.org_id
 WHERE k.hash = :hash AND k.revoked_at IS NULL
""")
_TOUCH = sa.text("UPDATE api_keys SET last_used_at = now() WHERE id = :id")


async def key_principal(db: Database, digest: str) -> tuple[Principal, float] | None:
    """The principal of the unrevoked key hashed `digest`, and the seconds since it was last
    used (a read: `touch_key` records a use)."""
    rows = await db.read(_LOOKUP, {"hash": digest})
    if not rows:
        return None
    row = rows[0]
    return (Principal(row.org_id, row.user_id, row.role, row.id, bool(row.operator)),
            float(row.idle))


async def touch_key(db: Database, key_id: UUID) -> None:
    """Record that the key was used now."""
    await db.write(_TOUCH, {"id": key_id})


async def create_key(
    db: Database, scope: Scope, *, user_id: UUID, name: str, role: str
) -> tuple[ApiKey, str]:
    """Create a key for a user of this org; returns the record and the key, shown once."""
    if role not in ROLES:
        raise ValidationFailed(f"role must be one of {', '.join(ROLES)}", code="invalid_role")
    key, prefix = new_key()
    source = sa.select(
        sa.literal(uuid.uuid4(), sa.Uuid), users.c.org_id, users.c.id, sa.literal(name),
        sa.literal(prefix), sa.literal(hash_key(key)), sa.literal(role),
    ).where(users.c.id == user_id, users.c.org_id == scope.org_id)
    stmt = api_keys.insert().from_select(
        ["id", "org_id", "user_id", "name", "prefix", "hash", "role"], source
    ).returning(api_keys)
    row = first(await db.write(stmt))
    if row is None:
        raise NotFound("user not found")
    return _key(row), key


async def list_keys(db: Database, scope: Scope) -> list[ApiKey]:
    stmt = (
        sa.select(api_keys)
        .where(api_keys.c.org_id == scope.org_id)
        .order_by(api_keys.c.created_at, api_keys.c.id)
    )
    return [_key(r) for r in await db.read(stmt)]


async def revoke_key(db: Database, scope: Scope, key_id: UUID) -> ApiKey:
    stmt = (
        api_keys.update()
        .where(api_keys.c.id == key_id, api_keys.c.org_id == scope.org_id)
        .values(revoked_at=sa.func.coalesce(api_keys.c.revoked_at, sa.func.now()))
        .returning(api_keys)
    )
    row = first(await db.write(stmt))
    if row is None:
        raise NotFound("api key not found")
    return _key(row)


async def any_key_exists(db: Database) -> bool:
    return bool(await db.read(sa.select(api_keys.c.id).limit(1)))


async def mark_operator(db: Database, org_id: UUID) -> None:
    """Make this org the installation's operator org (its admins manage other orgs)."""
    stmt = sa.text(
        "UPDATE orgs SET settings = settings || '{\"operator\": true}'::jsonb WHERE id = :id"
    )
    await db.write(stmt, {"id": org_id})


async def replace_key_hash(db: Database, key_id: UUID, prefix: str, digest: str) -> None:
    """Swap a key's secret for a preset one (the operator's ATOR_BOOTSTRAP_KEY)."""
    stmt = api_keys.update().where(api_keys.c.id == key_id).values(prefix=prefix, hash=digest)
    await db.write(stmt)
