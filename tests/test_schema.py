"""Migrations are the database's truth; the SQLAlchemy tables must describe the same schema."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from ator.store.schema import metadata


async def test_migrations_match_the_table_definitions(make_ator) -> None:
    async with make_ator() as ator, ator.db.connect() as conn:
        def diff(sync_conn):  # type: ignore[no-untyped-def]
            ctx = MigrationContext.configure(sync_conn, opts={"compare_type": True})
            return compare_metadata(ctx, metadata)

        assert await conn.run_sync(diff) == []


async def test_migrating_twice_is_a_no_op(make_ator) -> None:
    from ator.store.database import migrate

    async with make_ator() as ator:
        await migrate(ator.db.engine)
        await migrate(ator.db.engine)
