"""Setups: which model and provider a thread uses, its persona, caps and tool policy
(layer: store; imports sqlalchemy, ator.store.*, ator.security.limits).

A setup's `config` may name secrets only by reference ("secret:NAME"); resolving them is the
engine's business at turn start, and the resolved value is never written back. Checking
config and tool policy is the engine's (`Ator.validate_setup`); this module refuses only text
longer than a setup's fields hold.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import sqlalchemy as sa

from ator.errors import Conflict, NotFound
from ator.security.limits import PERSONA_CHARS, check_text
from ator.store.database import Database, first
from ator.store.records import Setup
from ator.store.schema import setups
from ator.store.scope import Scope

__all__ = ["archive_setup", "create_setup", "get_setup", "list_setups", "update_setup"]

_TEXT_LIMITS = {"name": 200, "provider": 50, "model": 200, "persona": PERSONA_CHARS}


def _check_texts(values: dict[str, Any]) -> None:
    for field, limit in _TEXT_LIMITS.items():
        value = values.get(field)
        if isinstance(value, str):
            check_text(value, (field,), limit)


def _setup(row: Any) -> Setup:
    return Setup(
        row.id,
        row.org_id,
        row.name,
        row.provider,
        row.model,
        row.persona,
        row.config,
        row.tool_policy,
        row.version,
        row.archived_at,
        row.created_at,
    )


async def create_setup(
    db: Database,
    scope: Scope,
    *,
    name: str,
    provider: str,
    model: str,
    persona: str = "",
    config: dict[str, Any] | None = None,
    tool_policy: dict[str, Any] | None = None,
) -> Setup:
    _check_texts({"name": name, "provider": provider, "model": model, "persona": persona})
    stmt = (
        setups.insert()
        .values(
            id=uuid.uuid4(),
            org_id=scope.org_id,
            name=name,
            provider=provider,
            model=model,
            persona=persona,
            config=config or {},
            tool_policy=tool_policy or {},
        )
        .returning(setups)
    )
    return _setup((await db.write(stmt))[0])


async def get_setup(db: Database, scope: Scope, setup_id: UUID) -> Setup:
    stmt = sa.select(setups).where(setups.c.id == setup_id, setups.c.org_id == scope.org_id)
    row = first(await db.read(stmt))
    if row is None:
        raise NotFound("setup not found")
    return _setup(row)


async def list_setups(db: Database, scope: Scope, *, include_archived: bool = False) -> list[Setup]:
    stmt = sa.select(setups).where(setups.c.org_id == scope.org_id)
    if not include_archived:
        stmt = stmt.where(setups.c.archived_at.is_(None))
    rows = await db.read(stmt.order_by(setups.c.created_at, setups.c.id))
    return [_setup(r) for r in rows]


async def update_setup(
    db: Database, scope: Scope, setup_id: UUID, *, expected_version: int | None = None,
    **changes: Any,
) -> Setup:
    """Apply changes and bump the version, so turn snapshots can tell versions apart.

    With `expected_version`, the update applies only to that version: raises Conflict
    (`setup_changed`) when the setup was changed meanwhile, NotFound when it is gone."""
    allowed = {"name", "provider", "model", "persona", "config", "tool_policy"}
    values = {k: v for k, v in changes.items() if k in allowed and v is not None}
    _check_texts(values)
    where = [setups.c.id == setup_id, setups.c.org_id == scope.org_id]
    if expected_version is not None:
        where.append(setups.c.version == expected_version)
    stmt = (
        setups.update()
        .where(*where)
        .values(**values, version=setups.c.version + 1, updated_at=sa.func.now())
        .returning(setups)
    )
    row = first(await db.write(stmt))
    if row is None:
        if expected_version is not None:
            await get_setup(db, scope, setup_id)  # NotFound when it is gone
            raise Conflict("the setup was changed by another request", code="setup_changed")
        raise NotFound("setup not found")
    return _setup(row)


async def archive_setup(db: Database, scope: Scope, setup_id: UUID) -> Setup:
    stmt = (
        setups.update()
        .where(setups.c.id == setup_id, setups.c.org_id == scope.org_id)
        .values(archived_at=sa.func.coalesce(setups.c.archived_at, sa.func.now()))
        .returning(setups)
    )
    row = first(await db.write(stmt))
    if row is None:
        raise NotFound("setup not found")
    return _setup(row)
