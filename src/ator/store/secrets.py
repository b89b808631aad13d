"""Encrypted secrets per org (layer: store; imports sqlalchemy, ator.security.crypto,
ator.security.limits).

Values are encrypted before they reach SQL and decrypted only when a turn resolves a
reference; nothing here returns a value except `reveal`.
"""

from __future__ import annotations

import re
import uuid

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert

from ator.errors import SecretError
from ator.security.crypto import MasterKey
from ator.security.limits import SECRET_VALUE_CHARS, check_text, refuse
from ator.store.database import Database, first
from ator.store.schema import secrets
from ator.store.scope import Scope

__all__ = ["SECRET_NAME", "delete_secret", "list_secret_names", "put_secret", "reveal"]

# What "secret:NAME" may name (providers.config checks references with the same pattern).
SECRET_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


def _context(scope: Scope, name: str) -> str:
    return f"{scope.org_id}/{name}"


async def put_secret(db: Database, key: MasterKey, scope: Scope, name: str, value: str) -> None:
    """Store (or replace) a secret. Raises ValidationFailed for a name a reference cannot
    spell, or an empty or over-long value."""
    if SECRET_NAME.match(name) is None:
        raise refuse(("name",), "must be 1-100 of A-Z a-z 0-9 _ . -", "invalid_secret_name")
    if not value:
        raise refuse(("value",), "is empty", "empty_secret")
    check_text(value, ("value",), SECRET_VALUE_CHARS)
    nonce, ciphertext = key.encrypt(value, context=_context(scope, name))
    stmt = insert(secrets).values(
        id=uuid.uuid4(), org_id=scope.org_id, name=name, nonce=nonce, ciphertext=ciphertext,
        key_id=key.key_id,
    )
    stmt = stmt.on_conflict_do_update(
        constraint="uq_secrets_org_name",
        set_={"nonce": nonce, "ciphertext": ciphertext, "key_id": key.key_id,
              "updated_at": sa.func.now()},
    )
    await db.write(stmt)


async def reveal(db: Database, key: MasterKey, scope: Scope, name: str) -> str:
    stmt = sa.select(secrets.c.nonce, secrets.c.ciphertext).where(
        secrets.c.org_id == scope.org_id, secrets.c.name == name
    )
    row = first(await db.read(stmt))
    if row is None:
        raise SecretError(f"secret {name!r} is not set for this org")
    return key.decrypt(row.nonce, row.ciphertext, context=_context(scope, name))


async def list_secret_names(db: Database, scope: Scope) -> list[str]:
    stmt = sa.select(secrets.c.name).where(secrets.c.org_id == scope.org_id).order_by(
        secrets.c.name
    )
    return [row.name for row in await db.read(stmt)]


async def delete_secret(db: Database, scope: Scope, name: str) -> bool:
    stmt = (
        secrets.delete()
        .where(secrets.c.org_id == scope.org_id, secrets.c.name == name)
        .returning(secrets.c.id)
    )
    return bool(await db.write(stmt))
