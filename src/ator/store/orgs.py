"""Orgs and their users (layer: store; imports sqlalchemy, ator.store.*).

Orgs are the tenants; creating one is an operator action and takes no Scope. Everything
else in store/ is reached through a Scope naming the org.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.errors import Conflict, NotFound
from ator.store.database import Database, first
from ator.store.records import Org
from ator.store.schema import orgs, users
from ator.store.scope import Scope

__all__ = [
    "create_org",
    "create_user",
    "find_user",
    "get_org",
    "list_orgs",
    "set_org_budget",
]


def _org(row: Any) -> Org:
    return Org(row.id, row.name, row.monthly_budget_usd, row.created_at)


async def create_org(db: Database, name: str, *, monthly_budget_usd: Decimal | None = None) -> Org:
    stmt = (
        orgs.insert()
        .values(id=uuid.uuid4(), name=name, monthly_budget_usd=monthly_budget_usd)
        .returning(orgs)
    )
    return _org((await db.write(stmt))[0])


async def get_org(db: Database, scope: Scope) -> Org:
    row = first(await db.read(sa.select(orgs).where(orgs.c.id == scope.org_id)))
    if row is None:
        raise NotFound("org not found")
    return _org(row)


async def list_orgs(db: Database) -> list[Org]:
    rows = await db.read(sa.select(orgs).order_by(orgs.c.created_at))
    return [_org(r) for r in rows]


async def set_org_budget(db: Database, scope: Scope, monthly_budget_usd: Decimal | None) -> Org:
    stmt = (
        orgs.update()
        .where(orgs.c.id == scope.org_id)
        .values(monthly_budget_usd=monthly_budget_usd)
        .returning(orgs)
    )
    row = first(await db.write(stmt))
    if row is None:
        raise NotFound("org not found")
    return _org(row)


async def create_user(db: Database, scope: Scope, email: str, role: str) -> UUID:
    user_id = uuid.uuid4()
    stmt = (
        sa.dialects.postgresql.insert(users)
        .values(id=user_id, org_id=scope.org_id, email=email, role=role)
        .on_conflict_do_nothing(constraint="uq_users_org_email")
        .returning(users.c.id)
    )
    if first(await db.write(stmt)) is None:
        raise Conflict(f"user {email!r} already exists in this org")
    return user_id


async def find_user(db: Database, scope: Scope, email: str) -> UUID:
    stmt = sa.select(users.c.id).where(users.c.org_id == scope.org_id, users.c.email == email)
    row = first(await db.read(stmt))
    if row is None:
        raise NotFound("user not found")
    return UUID(str(row.id))
