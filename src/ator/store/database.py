"""Connecting to PostgreSQL and keeping its schema current (layer: store).

May import: sqlalchemy (as a query builder and for migrations), asyncpg, alembic,
ator.settings, ator.errors, ator.store.embedded, ator.store.pool.

`open_database(settings)` gives a `Database`: one pool (store/pool.py), the process's only way
to the database, with the migrations applied first (under an advisory lock, so replicas starting
together migrate once, on a short-lived engine that is disposed right after), and a
`StatementStats` counter so tests and benchmarks can measure how many statements and commits
a piece of work costs.

Repositories build statements with SQLAlchemy Core or as text; `Database` compiles them for
asyncpg and runs them on the pool. The hot statements are module constants, compiled once per
process; SQLAlchemy's own engine (compile cache lookup, greenlet hop, events) cost about as
much CPU as the database work on the turn's path, and a second pool doubled the connections.
A Core statement, built per call, is compiled once per shape (SQLAlchemy's cache key) and
its values bound per call, as that engine's compile cache does.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import Compiled

from ator import jsonenc
from ator.errors import ConfigError, DatabaseUnavailable, ValidationFailed
from ator.settings import Settings
from ator.store.pool import Pool

__all__ = ["Database", "Result", "Row", "StatementStats", "applied_migrations", "first",
           "migration_heads", "open_database", "server_version", "to_async_url"]

_MIGRATIONS = Path(__file__).parent / "migrations"
_MIGRATION_LOCK = 0x61746F72  # "ator": pg_advisory_lock key serializing migrations
_DIALECT = asyncpg_dialect()  # type: ignore[no-untyped-call]
# Compiled Core statement shapes kept (least recently used out), as SQLAlchemy's own cache.
_CORE_SHAPES = 500


@dataclass
class StatementStats:
    """Counts what the engine sent. `commits` counts write transactions that committed (an
    explicit COMMIT, or one single-statement write in autocommit)."""

    statements: int = 0
    commits: int = 0

    def snapshot(self) -> tuple[int, int]:
        return self.statements, self.commits


class Row:
    """A result row, read by attribute (`row.seq`) or key (`row["seq"]`)."""

    __slots__ = ("_record",)

    def __init__(self, record: asyncpg.Record) -> None:
        self._record = record

    def __getattr__(self, name: str) -> Any:
        try:
            return self._record[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key: str | int) -> Any:
        return self._record[key]

    def keys(self) -> list[str]:
        return list(self._record.keys())


class Result:
    """The rows of one statement run inside a transaction."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self._rows = list(rows)

    def all(self) -> list[Row]:
        return self._rows

    def one(self) -> Row:
        if len(self._rows) != 1:
            raise LookupError(f"expected one row, got {len(self._rows)}")
        return self._rows[0]

    def first(self) -> Row | None:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)


class Connection:
    """A pool connection inside a transaction (`Database.begin`)."""

    def __init__(self, db: Database, conn: asyncpg.Connection) -> None:
        self._db = db
        self._conn = conn

    async def execute(self, stmt: Executable, params: Mapping[str, Any] | None = None) -> Result:
        sql, args = self._db.compile(stmt, params)
        self._db.stats.statements += 1
        try:
            records = await self._conn.fetch(sql, *args)
        except asyncpg.DataError as exc:
            raise _rejected(exc) from exc
        except asyncpg.InsufficientResourcesError as exc:
            raise _short_of(exc) from exc
        return Result([Row(r) for r in records])


class Database:
    """The pool plus the stats counter. Repositories take one of these."""

    def __init__(self, pool: Pool, *, url: str, embedded: bool) -> None:
        self.pool = pool
        self.url = url
        self.embedded = embedded
        self.stats = StatementStats()
        self._sql: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._core: OrderedDict[Any, Compiled] = OrderedDict()

    def _compiled(self, stmt: sa.TextClause) -> tuple[str, tuple[str, ...]]:
        # Keyed by the text (never by id(): a statement built per call may reuse the id of a
        # collected one). Hot statements are module constants whose str caches its hash.
        key = stmt.text
        if key not in self._sql:
            compiled = stmt.compile(dialect=_DIALECT)
            self._sql[key] = (compiled.string, tuple(compiled.positiontup or ()))
        return self._sql[key]

    def compile(
        self, stmt: Executable, params: Mapping[str, Any] | None = None
    ) -> tuple[str, list[Any]]:
        """asyncpg SQL and positional arguments for a Core or text statement."""
        if isinstance(stmt, sa.TextClause):
            sql, names = self._compiled(stmt)
            given = params or {}
            return sql, [given[n] for n in names]
        # A Core statement is built per call, so it is compiled once per shape: keyed by
        # SQLAlchemy's cache key (the statement's structure; its literal values are the key's
        # bind parameters, put back in by construct_params), as SQLAlchemy's engine does. A
        # compile is 5x the lookup (create_thread's insert: 270 us against 53 us).
        key = stmt._generate_cache_key()  # type: ignore[attr-defined]
        if key is None:  # a shape SQLAlchemy cannot key: compiled each time
            compiled = stmt.compile(dialect=_DIALECT,  # type: ignore[attr-defined]
                                    compile_kwargs={"render_postcompile": True})
            values = compiled.construct_params(dict(params) if params else None)
            return compiled.string, [values[n] for n in (compiled.positiontup or ())]
        compiled = self._core.get(key.key)
        if compiled is None:
            compiled = stmt._compiler(_DIALECT, cache_key=key)  # type: ignore[attr-defined]
            self._core[key.key] = compiled
            if len(self._core) > _CORE_SHAPES:
                self._core.popitem(last=False)
        else:
            self._core.move_to_end(key.key)
        values = compiled.construct_params(dict(params) if params else None,
                                           extracted_parameters=key.bindparams,
                                           _no_postcompile=True)
        if compiled.post_compile_params or compiled.literal_execute_params:
            # An IN list: its parameters are rendered per call, from the cached compile.
            state = compiled._process_parameters_for_postcompile(values)
            return state.statement, [state.parameters[n] for n in state.positiontup or ()]
        return compiled.string, [values[n] for n in (compiled.positiontup or ())]

    async def fetch(
        self, stmt: sa.TextClause, params: Mapping[str, Any], *, write: bool
    ) -> list[asyncpg.Record]:
        """Run one text statement on the pool (autocommit). Records are read by key."""
        sql, names = self._compiled(stmt)
        self.stats.statements += 1
        try:
            rows: list[asyncpg.Record] = await self.pool.fetch(sql, *[params[n] for n in names])
        except asyncpg.DataError as exc:
            raise _rejected(exc) from exc
        except asyncpg.InsufficientResourcesError as exc:
            raise _short_of(exc) from exc
        if write:
            self.stats.commits += 1
        return rows

    async def write(
        self, stmt: Executable, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        """Run one statement as its own transaction (autocommit: a single statement is atomic
        in PostgreSQL, and this saves the BEGIN and COMMIT round trips). Returns its rows."""
        rows = await self._run(stmt, params)
        self.stats.commits += 1
        return rows

    async def read(
        self, stmt: Executable, params: Mapping[str, Any] | None = None
    ) -> list[Row]:
        """Run one read-only statement outside an explicit transaction."""
        return await self._run(stmt, params)

    async def _run(self, stmt: Executable, params: Mapping[str, Any] | None) -> list[Row]:
        sql, args = self.compile(stmt, params)
        self.stats.statements += 1
        try:
            records = await self.pool.fetch(sql, *args)
        except asyncpg.DataError as exc:
            raise _rejected(exc) from exc
        except asyncpg.InsufficientResourcesError as exc:
            raise _short_of(exc) from exc
        return [Row(r) for r in records]

    @asynccontextmanager
    async def advisory_lock(self, key: int) -> AsyncIterator[None]:
        """Hold a session advisory lock (one holder across all processes) for the block."""
        async with self.pool.acquire() as conn:
            await conn.execute("SELECT pg_advisory_lock($1)", key)
            try:
                yield
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", key)

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[Connection]:
        """A connection in a transaction that commits on success and rolls back on error."""
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                yield Connection(self, conn)
        except asyncpg.InsufficientResourcesError as exc:  # at COMMIT (a statement maps its own)
            raise _short_of(exc) from exc
        self.stats.commits += 1

    async def ping(self) -> bool:
        await self.pool.fetchval("SELECT 1")
        return True

    async def close(self) -> None:
        await self.pool.close()


def _encode_json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


async def _init_connection(conn: asyncpg.Connection) -> None:
    # Same JSON handling as SQLAlchemy's dialect: text in (pre-serialized str or a value),
    # Python objects out, read by the process's one decoder (orjson's speed, the standard
    # library's values: the stdlib decoder was 2.4% of a turn's instructions).
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=_encode_json, decoder=jsonenc.loads,
                                  schema="pg_catalog")




def _rejected(exc: Exception) -> ValidationFailed:
    """A value PostgreSQL cannot store (a NUL in text, NaN in JSON, an out-of-range number)
    is the caller's bad input, not a server fault."""
    return ValidationFailed(f"the database rejected a value: {exc}", code="invalid_value")


def _short_of(exc: asyncpg.InsufficientResourcesError) -> DatabaseUnavailable:
    """PostgreSQL short of a resource (class 53): the request may be tried again later."""
    if isinstance(exc, asyncpg.DiskFullError):
        return DatabaseUnavailable("the database's disk is full; try again later",
                                   code="database_disk_full")
    return DatabaseUnavailable(f"the database is short of resources ({exc.sqlstate}); "
                               "try again later")


def first(rows: list[Row]) -> Row | None:
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


async def migrate(url: URL) -> None:
    """Apply migrations to head on a short-lived engine; concurrent callers wait on one
    advisory lock."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK})
            try:
                await conn.run_sync(_upgrade)
                await conn.commit()
            finally:
                await conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"),
                                   {"k": _MIGRATION_LOCK})
                await conn.commit()
    finally:
        await engine.dispose()


def migration_heads() -> set[str]:
    """The migration heads this code expects (from the scripts, no database needed)."""
    return set(ScriptDirectory.from_config(_alembic_config()).get_heads())


async def applied_migrations(db: Database) -> set[str]:
    """The migration heads recorded in the database (none before the first migration)."""
    exists = (await db.read(sa.text("SELECT to_regclass('alembic_version') IS NOT NULL")))[0][0]
    if not exists:
        return set()
    return {r[0] for r in await db.read(sa.text("SELECT version_num FROM alembic_version"))}


async def server_version(db: Database) -> str:
    return str((await db.read(sa.text("SHOW server_version")))[0][0])


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
    if run_migrations:
        await migrate(url)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)

    async def connect() -> asyncpg.Connection:
        # No reset between users: pool statements run in autocommit and leave no session
        # state (no SET or cursors; LISTEN and session locks are undone by their holders).
        conn = await asyncpg.connect(dsn, server_settings={"application_name": "ator"})
        try:
            await _init_connection(conn)
        except BaseException:
            conn.terminate()
            raise
        return conn

    pool = await Pool.open(connect, min_size=1, max_size=settings.db_pool_size)
    return Database(pool, url=url.render_as_string(hide_password=True), embedded=embedded)
