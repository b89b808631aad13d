"""MCP servers as org resources, and what turns mount from them (layer: engine; imports
store.mcp_servers, store.secrets, mcp.*, tools.base, tools.results, net, security.limits,
errors).

`McpService` owns the session pool, the per-turn `McpToolset`, the stored-results service
that `read_tool_result` pages through (tools/results.py; the registry decides the pages),
`web_fetch`'s gate (engine.gated) and the catalog a turn reads (the org's enabled servers with
their secret references resolved). `McpServers` is the org resource's service: CRUD and
`test_mcp_server` with the checks a tenant's input needs — http only (stdio servers come from
the operator's settings), a URL the egress guard may reach and carrying no credential (no
userinfo, no `?api_key=`: 422 `secret_in_config`), headers as secret
references only.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ator.coord.base import Coordinator
from ator.coord.catalog import catalog_changed
from ator.engine.gated import PolicyGated
from ator.engine.recent import Recent
from ator.errors import AtorError, EgressBlocked, SecretError, ValidationFailed
from ator.mcp.client import McpEndpoint, McpSession, RemoteTool
from ator.mcp.pool import McpPool
from ator.mcp.toolset import McpToolset, MountedServer
from ator.net.egress import Egress
from ator.security.crypto import MasterKey
from ator.security.limits import check_storable, refuse
from ator.security.redact import url_credential
from ator.settings import Settings
from ator.store import mcp_servers as server_store
from ator.store import secrets as secret_store
from ator.store.database import Database
from ator.store.mcp_servers import McpServer
from ator.store.scope import Scope
from ator.tools.results import StoredResults, read_tool_result
from ator.tools.web import web_fetch_tool

__all__ = ["McpServerIn", "McpServers", "McpService", "PolicyGated", "StoredResults",
           "read_tool_result"]

log = logging.getLogger(__name__)

_REF = re.compile(r"^(?:(Bearer|Basic) )?secret:([A-Za-z0-9_.\-]{1,100})$")
_STDIO_NS = uuid.UUID("5f0e0c55-6d63-4f70-8000-00000000a708")

ServerName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")]
HeaderName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9-]{1,100}$")]
HeaderRef = Annotated[str, StringConstraints(pattern=_REF.pattern)]
Glob = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class McpServerIn(BaseModel):
    """A tenant's MCP server as written (POST; PATCH takes the same fields, all optional)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: ServerName
    transport: Literal["http", "stdio"] = "http"
    url: Annotated[str, StringConstraints(max_length=2000)] | None = None
    headers: Annotated[dict[HeaderName, HeaderRef], Field(max_length=20)] = Field(
        default_factory=dict)
    token: Annotated[str, StringConstraints(pattern=r"^secret:[A-Za-z0-9_.\-]{1,100}$")] | None \
        = None
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    enabled: bool = True
    allow: Annotated[list[Glob], Field(max_length=500)] | None = None
    deny: Annotated[list[Glob], Field(max_length=500)] = Field(default_factory=list)


def _invalid(exc: ValidationError) -> ValidationFailed:
    errors = [{"loc": [str(p) for p in e["loc"]], "msg": str(e["msg"]), "type": e["type"]}
              for e in exc.errors(include_url=False, include_input=False)]
    where = ".".join(errors[0]["loc"]) or "body"
    return ValidationFailed(f"{where}: {errors[0]['msg']}", code="invalid_mcp_server",
                            errors=errors)


class McpService:
    """The process's MCP machinery (one per `Ator`)."""

    def __init__(self, settings: Settings, db: Database, master_key: MasterKey,
                 egress: Egress | None = None) -> None:
        self.settings = settings
        self.db = db
        self.master_key = master_key
        self.egress = egress or Egress.from_settings(settings)
        self.pool = McpPool(self.egress, idle_ttl=settings.mcp_session_idle_ttl,
                            max_sessions=settings.mcp_max_sessions,
                            max_per_org=settings.mcp_max_sessions_per_org)
        self.results = StoredResults(db)
        self.recent = Recent(settings.mcp_catalog_ttl)
        self.gated = PolicyGated(db, [web_fetch_tool(self.egress)], settings.mcp_catalog_ttl)
        self.toolset = McpToolset(self, self.pool,
                                  description_chars=settings.mcp_description_chars,
                                  companions=(read_tool_result,),
                                  search_threshold=settings.mcp_tool_search_threshold,
                                  listing_ttl=settings.mcp_catalog_ttl)

    async def aclose(self) -> None:
        await self.pool.aclose()

    async def endpoint(self, scope: Scope, server: McpServer) -> McpEndpoint:
        """The server with its header references resolved (SecretError when one is unset)."""
        headers: dict[str, str] = {}
        for key, ref in server.headers.items():
            m = _REF.match(ref)
            if m is None:
                raise SecretError(f"header {key!r} of {server.name!r} is not a secret reference")
            value = await secret_store.reveal(self.db, self.master_key, scope, m.group(2))
            headers[key] = f"{m.group(1)} {value}" if m.group(1) else value
        return McpEndpoint(server.name, server.transport, server.url, (), headers,
                           server.timeout_s)

    def operator_servers(self) -> list[MountedServer]:
        return [MountedServer(uuid.uuid5(_STDIO_NS, name),
                              McpEndpoint(name, "stdio", None, tuple(cmd), {}, 30.0), None)
                for name, cmd in sorted(self.settings.mcp_stdio_servers.items())]

    async def mounted(self, org_id: UUID) -> Sequence[MountedServer]:
        found: list[MountedServer] | None = self.recent.get(org_id)
        if found is None:
            found = await self._read_mounted(org_id)
            self.recent.put(org_id, found)
        return found

    async def _read_mounted(self, org_id: UUID) -> list[MountedServer]:
        scope = Scope(org_id)
        out = self.operator_servers()
        for server in await server_store.list_servers(self.db, scope, enabled_only=True):
            try:
                endpoint = await self.endpoint(scope, server)
            except SecretError as exc:
                log.warning("MCP server %s left out: %s", server.name, exc.message)
                continue
            tools = None if server.catalog is None else [RemoteTool.from_record(t)
                                                         for t in server.catalog]
            out.append(MountedServer(server.id, endpoint, tools, server.allow, server.deny))
        return out



class McpServers:
    """An org's MCP servers: CRUD and `test_mcp_server` (the service the API reaches through
    `Ator.service(McpServers)`)."""

    def __init__(self, db: Database, mcp: McpService, coord: Coordinator | None = None
                 ) -> None:
        self.db = db
        self.mcp = mcp
        self.coord = coord  # where a change of the org's catalog is announced

    def _check_server(self, values: Mapping[str, Any]) -> dict[str, Any]:
        check_storable(dict(values))  # NUL: `unstorable_value`, as in every request body
        try:
            parsed = McpServerIn.model_validate(dict(values))
        except ValidationError as exc:
            raise _invalid(exc) from None
        if "__" in parsed.name:
            raise ValidationFailed(
                "name: must not contain '__' (it separates the server from the tool in "
                "server__tool)", code="invalid_mcp_server",
                errors=[{"loc": ["name"], "msg": "contains '__'", "type": "invalid_mcp_server"}])
        if parsed.transport == "stdio":
            raise ValidationFailed(
                "stdio MCP servers run a process on the server's machine: only the operator "
                "configures them (ATOR_MCP_STDIO_SERVERS); register an http server",
                code="mcp_transport_unsupported",
                errors=[{"loc": ["transport"], "msg": "stdio is operator-only",
                         "type": "mcp_transport_unsupported"}])
        if not parsed.url:
            raise ValidationFailed("url: required for an http MCP server",
                                   code="invalid_mcp_server",
                                   errors=[{"loc": ["url"], "msg": "required", "type": "missing"}])
        if (what := url_credential(parsed.url)) is not None:
            # The setups' rule (providers.config): a credential never sits in a URL, where
            # every viewer's GET and the HTTP client's log would show it.
            raise refuse(("url",), f"this URL carries a credential in {what}; put credentials "
                         "in headers as secret references (\"token\": \"secret:NAME\", or "
                         "\"headers\": {\"X-Api-Key\": \"secret:NAME\"})", "secret_in_config")
        try:  # a private literal or a loopback name is refused now, not at the first call
            self.mcp.egress.guard.check_url(parsed.url)
        except EgressBlocked as exc:
            raise ValidationFailed(f"url: {exc.message}", code=exc.code, errors=[
                {"loc": ["url"], "msg": exc.message, "type": exc.code}]) from None
        out = parsed.model_dump(exclude={"token"})
        if parsed.token is not None:
            out["headers"] = {**out["headers"], "Authorization": f"Bearer {parsed.token}"}
        return out

    async def create_mcp_server(self, scope: Scope, **values: Any) -> McpServer:
        checked = self._check_server(values)
        self.mcp.recent.drop(scope.org_id)
        made = await server_store.create_server(self.db, scope, **checked)
        await catalog_changed(self.coord, scope.org_id, "mcp_server")
        return made

    async def list_mcp_servers(self, scope: Scope) -> list[McpServer]:
        return await server_store.list_servers(self.db, scope)

    async def get_mcp_server(self, scope: Scope, server_id: UUID) -> McpServer:
        return await server_store.get_server(self.db, scope, server_id)

    async def update_mcp_server(self, scope: Scope, server_id: UUID, **changes: Any
                                ) -> McpServer:
        current = await server_store.get_server(self.db, scope, server_id)
        merged = {"name": current.name, "transport": current.transport, "url": current.url,
                  "headers": current.headers, "timeout_s": current.timeout_s,
                  "enabled": current.enabled, "allow": current.allow, "deny": current.deny,
                  **changes}
        checked = self._check_server(merged)
        reach_changed = (checked["url"], checked["headers"]) != (current.url, current.headers)
        if reach_changed:  # a catalog synced from another endpoint is not this one's
            checked["catalog"] = None
        self.mcp.recent.drop(scope.org_id)
        updated = await server_store.update_server(self.db, scope, server_id, **checked)
        await catalog_changed(self.coord, scope.org_id, "mcp_server")
        return updated

    async def delete_mcp_server(self, scope: Scope, server_id: UUID) -> None:
        self.mcp.recent.drop(scope.org_id)
        await server_store.delete_server(self.db, scope, server_id)
        await catalog_changed(self.coord, scope.org_id, "mcp_server")

    async def test_mcp_server(self, scope: Scope, server_id: UUID) -> dict[str, Any]:
        """Connect, negotiate, list the tools, store them as the server's catalog. Returns
        what was found: `ok`, era, transport, server name/version, tools with sizes; or `ok`
        false with the error's code, message and facts (also stored as `last_test`)."""
        server = await server_store.get_server(self.db, scope, server_id)
        report: dict[str, Any]
        session: McpSession | None = None
        try:
            endpoint = await self.mcp.endpoint(scope, server)
            session = await McpSession.open(endpoint, self.mcp.egress)
            tools = await session.list_tools()
            report = {
                "ok": True, "era": session.era, "transport": session.transport,
                "server": session.server_info,
                "tools": [{"name": t.name, "size": t.size, "read_only": t.read_only}
                          for t in tools],
                "tool_count": len(tools), "definition_chars": sum(t.size for t in tools),
            }
            await server_store.update_server(self.db, scope, server_id,
                                             catalog=[t.record() for t in tools],
                                             last_test=report)
            self.mcp.recent.drop(scope.org_id)
            await catalog_changed(self.coord, scope.org_id, "mcp_server")
        except AtorError as exc:
            report = {"ok": False, "error": {"code": exc.code, "message": exc.message,
                                             "facts": getattr(exc, "facts", {})}}
            await server_store.update_server(self.db, scope, server_id, last_test=report)
        finally:
            if session is not None:
                await session.aclose()
        return report

