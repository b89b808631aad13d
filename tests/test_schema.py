"""Migrations are the database's truth; the SQLAlchemy tables must describe the same schema."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from ator.store.database import migrate, to_async_url
from ator.store.schema import OPTIONAL_TABLES, metadata


@pytest.fixture
async def engine(make_ator, database_url: str) -> AsyncIterator[AsyncEngine]:
    async with make_ator():  # migrates the test database
        pass
    engine = create_async_engine(to_async_url(database_url), poolclass=NullPool)
    yield engine
    await engine.dispose()


async def test_migrations_match_the_table_definitions(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        def diff(sync_conn):  # type: ignore[no-untyped-def]
            ctx = MigrationContext.configure(sync_conn, opts={
                "compare_type": True,
                "include_name": lambda name, kind, _parent: not (
                    kind == "table" and name in OPTIONAL_TABLES)})
            return compare_metadata(ctx, metadata)

        assert await conn.run_sync(diff) == []


async def test_migrating_twice_is_a_no_op(engine: AsyncEngine, database_url: str) -> None:
    await migrate(to_async_url(database_url))
    await migrate(to_async_url(database_url))
