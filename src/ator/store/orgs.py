"""Orgs and their users (layer: store; imports sqlalchemy, ator.store.*).

Orgs are the tenants; creating one is an operator action and takes no Scope. Everything
else in store/ is reached through a Scope naming the org.

Budgets have two levels: the operator's ceiling (`budget_ceiling_usd`) and the org admin's
own monthly budget, which must be at or below it. Who may set which is decided in api/;
the rule "budget <= ceiling" is checked here, in the same statement that writes, so a
concurrent change of the other value cannot slip past it.
"""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.errors import Conflict, NotFound, ValidationFailed
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
    "set_daily_cap",
    "set_org_budget",
    "set_org_ceiling",
]


def _org(row: Any) -> Org:
    return Org(row.id, row.name, row.monthly_budget_usd, row.created_at,
               row.budget_ceiling_usd)


def _above_ceiling(budget: Decimal, ceiling: Decimal) -> ValidationFailed:
    return ValidationFailed(
        f"a monthly budget of ${budget} is above the org's ceiling of ${ceiling}, which only "
        "the operator can change", code="budget_above_ceiling")


async def create_org(
    db: Database, name: str, *, monthly_budget_usd: Decimal | None = None,
    budget_ceiling_usd: Decimal | None = None,
) -> Org:
    """Create an org (an operator action). Raises ValidationFailed when the budget is above
    the ceiling."""
    if (monthly_budget_usd is not None and budget_ceiling_usd is not None
            and monthly_budget_usd > budget_ceiling_usd):
        raise _above_ceiling(monthly_budget_usd, budget_ceiling_usd)
    stmt = (
        orgs.insert()
        .values(id=uuid.uuid4(), name=name, monthly_budget_usd=monthly_budget_usd,
                budget_ceiling_usd=budget_ceiling_usd)
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
    """Set or clear the org's own monthly budget. Clearing it leaves the ceiling in force.
    Raises ValidationFailed (`budget_above_ceiling`) when it is above the ceiling."""
    where = [orgs.c.id == scope.org_id]
    if monthly_budget_usd is not None:
        where.append(sa.or_(orgs.c.budget_ceiling_usd.is_(None),
                            orgs.c.budget_ceiling_usd >= monthly_budget_usd))
    stmt = orgs.update().where(*where).values(monthly_budget_usd=monthly_budget_usd)
    row = first(await db.write(stmt.returning(orgs)))
    if row is not None:
        return _org(row)
    org = await get_org(db, scope)  # NotFound, or the ceiling refused it
    assert monthly_budget_usd is not None and org.budget_ceiling_usd is not None
    raise _above_ceiling(monthly_budget_usd, org.budget_ceiling_usd)


async def set_org_ceiling(db: Database, scope: Scope, budget_ceiling_usd: Decimal | None) -> Org:
    """Set or clear the operator's ceiling for the org (an operator action: the caller
    checks). A ceiling below the org's own budget is allowed; the lower one is in force."""
    stmt = (
        orgs.update()
        .where(orgs.c.id == scope.org_id)
        .values(budget_ceiling_usd=budget_ceiling_usd)
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


async def set_daily_cap(db: Database, scope: Scope, daily_budget_usd: Decimal | None,
                        time_zone: str | None) -> None:
    """Set (or clear, with None) the org's daily cap and the IANA zone its day starts in
    (`orgs.settings`; the caller checks the zone). Raises NotFound for no such org."""
    stmt = orgs.update().where(orgs.c.id == scope.org_id).values(
        settings=orgs.c.settings.op("||")(sa.func.jsonb_build_object(
            sa.literal("daily_budget_usd", sa.Text),
            sa.cast(None if daily_budget_usd is None else str(daily_budget_usd), sa.Text),
            sa.literal("time_zone", sa.Text), sa.cast(time_zone, sa.Text))))
    if first(await db.write(stmt.returning(orgs.c.id))) is None:
        raise NotFound("org not found")
