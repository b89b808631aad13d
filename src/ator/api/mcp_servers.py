"""MCP servers: CRUD and test (layer: api). Reading needs viewer; writing and testing admin.

Bodies are typed (`api.schemas.McpServerBody` / `McpServerPatch`: an unknown key is a 422
`validation_failed`). Every route goes through the runtime (`Ator.*_mcp_server`), which
checks a server as it would be stored: http only for tenants, a URL the egress guard may
reach and with no credential in it, headers as secret references. Another org's server is a
404. A URL stored before credentials in URLs were refused is shown redacted."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import APIRouter, Depends, Response

from ator.api.auth import get_ator, require
from ator.api.schemas import McpServerBody, McpServerPatch
from ator.engine.mcp import McpServers
from ator.engine.runtime import Ator
from ator.security.redact import redact
from ator.store.records import McpServer, Principal

router = APIRouter(prefix="/v1/mcp-servers")


def view(s: McpServer) -> dict[str, Any]:
    return {
        # A row written before URLs with credentials were refused shows them redacted.
        "id": str(s.id), "name": s.name, "transport": s.transport, "url": redact(s.url),
        "headers": s.headers, "timeout_s": s.timeout_s, "enabled": s.enabled,
        "allow": s.allow, "deny": s.deny, "version": s.version,
        "tools": [{"name": t.get("name"), "size": t.get("size"),
                   "read_only": t.get("read_only")} for t in (s.catalog or [])],
        "synced": s.catalog is not None, "last_test": s.last_test,
        "created_at": s.created_at.isoformat(),
    }


@router.post("", status_code=201)
async def create_server(
    body: McpServerBody, p: Principal = Depends(require("admin")),
    ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    return view(await ator.service(McpServers).create_mcp_server(
        p.scope, **body.model_dump(exclude_unset=True)))


@router.get("")
async def list_servers(
    p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return {"data": [view(s) for s in await ator.service(McpServers).list_mcp_servers(p.scope)]}


@router.get("/{server_id}")
async def get_server(
    server_id: UUID, p: Principal = Depends(require("viewer")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return view(await ator.service(McpServers).get_mcp_server(p.scope, server_id))


@router.patch("/{server_id}")
async def patch_server(
    server_id: UUID, body: McpServerPatch,
    p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator),
) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    return view(await ator.service(McpServers).update_mcp_server(p.scope, server_id, **changes))


@router.delete("/{server_id}", status_code=204)
async def delete_server(
    server_id: UUID, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> Response:
    await ator.service(McpServers).delete_mcp_server(p.scope, server_id)
    return Response(status_code=204)


@router.post("/{server_id}/test")
async def test_server(
    server_id: UUID, p: Principal = Depends(require("admin")), ator: Ator = Depends(get_ator)
) -> dict[str, Any]:
    return await ator.service(McpServers).test_mcp_server(p.scope, server_id)
