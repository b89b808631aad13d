"""An org's MCP servers, and tool results stored whole (layer: store; imports sqlalchemy,
ator.store.*, ator.security.limits).

Headers are stored as secret references only ("secret:NAME"); checking a server's fields is
the engine's (`engine/mcp.py`). Every statement filters on the scope's org: another org's
server is simply not found.
"""

from __future__ import annotations

import uuid
from typing import Any
from uuid import UUID

import sqlalchemy as sa
from asyncpg import UniqueViolationError

from ator.errors import Conflict, NotFound
from ator.store.database import Database, first
from ator.store.records import McpServer
from ator.store.schema import mcp_servers, tool_results
from ator.store.scope import Scope

__all__ = [
    "McpServer",
    "create_server",
    "delete_server",
    "get_server",
    "list_servers",
    "read_result",
    "save_result",
    "update_server",
]

_FIELDS = ("name", "transport", "url", "headers", "timeout_s", "enabled", "allow", "deny",
           "catalog", "last_test")


def _server(row: Any) -> McpServer:
    return McpServer(row.id, row.org_id, row.name, row.transport, row.url, dict(row.headers),
                     float(row.timeout_s), bool(row.enabled), row.allow, list(row.deny),
                     row.catalog, row.last_test, row.version, row.created_at)


def _taken(name: str) -> Conflict:
    return Conflict(f"an MCP server named {name!r} already exists in this org",
                    code="mcp_server_exists")


async def create_server(db: Database, scope: Scope, **values: Any) -> McpServer:
    stmt = (mcp_servers.insert()
            .values(id=uuid.uuid4(), org_id=scope.org_id,
                    **{k: v for k, v in values.items() if k in _FIELDS})
            .returning(mcp_servers))
    try:
        return _server((await db.write(stmt))[0])
    except UniqueViolationError:
        raise _taken(str(values.get("name"))) from None


async def get_server(db: Database, scope: Scope, server_id: UUID) -> McpServer:
    stmt = sa.select(mcp_servers).where(mcp_servers.c.id == server_id,
                                        mcp_servers.c.org_id == scope.org_id)
    row = first(await db.read(stmt))
    if row is None:
        raise NotFound("MCP server not found")
    return _server(row)


async def list_servers(db: Database, scope: Scope, *, enabled_only: bool = False
                       ) -> list[McpServer]:
    stmt = sa.select(mcp_servers).where(mcp_servers.c.org_id == scope.org_id)
    if enabled_only:
        stmt = stmt.where(mcp_servers.c.enabled.is_(True))
    rows = await db.read(stmt.order_by(mcp_servers.c.name))
    return [_server(r) for r in rows]


async def update_server(db: Database, scope: Scope, server_id: UUID, **changes: Any
                        ) -> McpServer:
    """Apply `changes` (keys in _FIELDS; a None value for allow/catalog/last_test clears it
    only when passed explicitly) and bump the version."""
    values = {k: v for k, v in changes.items() if k in _FIELDS}
    stmt = (mcp_servers.update()
            .where(mcp_servers.c.id == server_id, mcp_servers.c.org_id == scope.org_id)
            .values(**values, version=mcp_servers.c.version + 1, updated_at=sa.func.now())
            .returning(mcp_servers))
    try:
        row = first(await db.write(stmt))
    except UniqueViolationError:
        raise _taken(str(values.get("name"))) from None
    if row is None:
        raise NotFound("MCP server not found")
    return _server(row)


async def delete_server(db: Database, scope: Scope, server_id: UUID) -> None:
    stmt = (mcp_servers.delete()
            .where(mcp_servers.c.id == server_id, mcp_servers.c.org_id == scope.org_id)
            .returning(mcp_servers.c.id))
    if first(await db.write(stmt)) is None:
        raise NotFound("MCP server not found")


async def save_result(db: Database, scope: Scope, thread_id: UUID, content: str) -> UUID:
    rid = uuid.uuid4()
    await db.write(tool_results.insert().values(id=rid, org_id=scope.org_id,
                                                thread_id=thread_id, content=content))
    return rid


async def read_result(db: Database, scope: Scope, result_id: UUID) -> str:
    stmt = sa.select(tool_results.c.content).where(tool_results.c.id == result_id,
                                                   tool_results.c.org_id == scope.org_id)
    row = first(await db.read(stmt))
    if row is None:
        raise NotFound("stored tool result not found")
    return str(row.content)
