"""Connecting to PostgreSQL and keeping its schema current (layer: store).

May import: sqlalchemy, asyncpg, alembic, ator.settings, ator.errors, ator.store.embedded.

`open_database(settings)` gives a `Database`: an async SQLAlchemy engine on asyncpg with the
migrations applied (under an advisory lock, so replicas starting together migrate once), and
a `StatementStats` counter so tests and benchmarks can measure how many statements and
commits a piece of work costs.

The few statements a turn is made of go through `fetch`: a plain asyncpg pool running
pre-compiled text statements, one round trip each in autocommit. SQLAlchemy's per-execute
machinery (compile cache lookup, greenlet hop, events, connection characteristics) cost
about as much CPU as the database work on that path. Everything else uses the engine.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import URL, Row, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.sql.base import Executable

from ator.errors import ConfigError, ValidationFailed
from ator.settings import Settings

__all__ = ["Database", "StatementStats", "first", "open_database", "to_async_url"]

_MIGRATIONS = Path(__file__).parent / "migrations"
_MIGRATION_LOCK = 0x61746F72  # "ator": pg_advisory_lock key serializing migrations


@dataclass
class StatementStats:
    """Counts what the engine sent. `commits` counts write transactions that committed (an
    explicit COMMIT, or one single-statement write in autocommit)."""

    statements: int = 0
    commits: int = 0

    def snapshot(self) -> tuple[int, int]:
        return self.statements, self.commits


class Database:
    """An engine plus the stats counter. Repositories take one of these."""

    def __init__(
        self, engine: AsyncEngine, *, url: str, embedded: bool,
        pool: asyncpg.Pool | None = None,
    ) -> None:
        self.engine = engine
        self.pool = pool
        self._sql: dict[int, tuple[str, tuple[str, ...]]] = {}
        self.url = url
        self.embedded = embedded
        self.stats = StatementStats()
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        sync = engine.sync_engine
        event.listen(sync, "before_cursor_execute", self._on_statement)
        event.listen(sync, "commit", self._on_commit)

    def _on_statement(self, *_: Any) -> None:
        self.stats.statements += 1

    def _on_commit(self, *_: Any) -> None:
        self.stats.commits += 1

    def _compiled(self, stmt: sa.TextClause) -> tuple[str, tuple[str, ...]]:
        key = id(stmt)  # hot statements are module constants, compiled once per process
        if key not in self._sql:
            compiled = stmt.compile(dialect=self.engine.dialect)
            self._sql[key] = (compiled.string, tuple(compiled.positiontup or ()))
        return self._sql[key]

    async def fetch(
        self, stmt: sa.TextClause, params: Mapping[str, Any], *, write: bool
    ) -> list[asyncpg.Record]:
        """Run one text statement on the asyncpg pool (autocommit). Records are read by key."""
        assert self.pool is not None, "the database was opened without its asyncpg pool"
        sql, names = self._compiled(stmt)
        self.stats.statements += 1
        try:
            rows: list[asyncpg.Record] = await self.pool.fetch(sql, *[params[n] for n in names])
        except asyncpg.DataError as exc:
            raise _rejected(exc) from exc
        if write:
            self.stats.commits += 1
        return rows

    async def write(
        self, stmt: Executable, params: Mapping[str, Any] | None = None
    ) -> list[Row[Any]]:
        """Run one statement as its own transaction (autocommit: a single statement is atomic
        in PostgreSQL, and this saves the BEGIN and COMMIT round trips). Returns its rows."""
        try:
            async with self._autocommit.connect() as conn:
                result = await conn.execute(stmt, params)
                rows = list(result.all()) if result.returns_rows else []
        except DBAPIError as exc:
            raise _data_error(exc) from exc
        self.stats.commits += 1
        return rows

    async def read(
        self, stmt: Executable, params: Mapping[str, Any] | None = None
    ) -> list[Row[Any]]:
        """Run one read-only statement outside an explicit transaction."""
        try:
            async with self._autocommit.connect() as conn:
                return list((await conn.execute(stmt, params)).all())
        except DBAPIError as exc:
            raise _data_error(exc) from exc

    @asynccontextmanager
    async def advisory_lock(self, key: int) -> AsyncIterator[None]:
        """Hold a session advisory lock (one holder across all processes) for the block."""
        async with self._autocommit.connect() as conn:
            await conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": key})
            try:
                yield
            finally:
                await conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A connection in a transaction that commits on success and rolls back on error."""
        async with self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[AsyncConnection]:
        """A connection for reads; nothing it does is committed."""
        async with self.engine.connect() as conn:
            yield conn

    async def ping(self) -> bool:
        async with self.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
        return True

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        await self.engine.dispose()


def _encode_json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


async def _init_connection(conn: asyncpg.Connection) -> None:
    # Same JSON handling as SQLAlchemy's dialect: text in (pre-serialized str or a value),
    # Python objects out.
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=_encode_json, decoder=json.loads,
                                  schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """No reset on release: pool statements run in autocommit and change no session state
    (no SET, LISTEN, cursors or session locks), and asyncpg's default reset is one more
    round trip and server transaction per statement."""


def _rejected(exc: Exception) -> ValidationFailed:
    return ValidationFailed(f"the database rejected a value: {exc}", code="invalid_value")


def _data_error(exc: DBAPIError) -> Exception:
    """A value PostgreSQL cannot store (a NUL in text, NaN in JSON, an out-of-range number)
    is the caller's bad input, not a server fault; anything else stays as it was."""
    cause = getattr(exc.orig, "__cause__", None) or exc.orig
    if isinstance(cause, asyncpg.DataError):
        return _rejected(cause)
    return exc


def first(rows: list[Row[Any]]) -> Row[Any] | None:
    return rows[0] if rows else None


def to_async_url(url: str) -> URL:
    """Accept postgres://, postgresql:// or postgresql+asyncpg:// and return the asyncpg URL."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ConfigError(f"ATOR_DATABASE_URL must be a PostgreSQL URL, got {parsed.drivername!r}")
    return parsed.set(drivername="postgresql+asyncpg")


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


def _upgrade(sync_conn: sa.Connection) -> None:
    cfg = _alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.upgrade(cfg, "head")


async def migrate(engine: AsyncEngine) -> None:
    """Apply migrations to head; concurrent callers wait on one advisory lock."""
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK})
        try:
            await conn.run_sync(_upgrade)
            await conn.commit()
        finally:
            await conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK})
            await conn.commit()


async def open_database(settings: Settings, *, run_migrations: bool = True) -> Database:
    """Connect to ATOR_DATABASE_URL, or start the embedded server in the data dir."""
    embedded = settings.database_url is None
    if embedded:
        from ator.store.embedded import start_embedded

        raw = await asyncio.to_thread(start_embedded, settings.data_dir)
    else:
        assert settings.database_url is not None
        raw = settings.database_url
    url = to_async_url(raw)
    engine = create_async_engine(
        url,
        # The engine serves the cold paths; the turn's statements use the asyncpg pool.
        pool_size=max(2, settings.db_pool_size // 4),
        max_overflow=settings.db_pool_size,
        pool_pre_ping=False,
        connect_args={"server_settings": {"application_name": "ator"}},
    )
    pool = await asyncpg.create_pool(
        url.set(drivername="postgresql").render_as_string(hide_password=False),
        min_size=1,
        max_size=settings.db_pool_size,
        init=_init_connection,
        reset=_keep_session,
        server_settings={"application_name": "ator"},
    )
    db = Database(engine, url=url.render_as_string(hide_password=True), embedded=embedded,
                  pool=pool)
    if run_migrations:
        await migrate(engine)
    return db
