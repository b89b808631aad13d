"""`/mcp`: an org's tools served to outside MCP clients (layer: gateway; imports mcp, starlette,
engine facades `Access` and `ToolCalls`, coord, settings).

    MCP client ──POST/GET/DELETE /mcp──▶ McpGateway.__call__
        bearer org key → Access.authenticate (401 otherwise), rate limit per key
        └─ the SDK's StreamableHTTPSessionManager, which picks the era per request from
           `MCP-Protocol-Version`: 2026-07-28 is one sessionless POST; the handshake eras get
           `initialize` and an `Mcp-Session-Id`, bound to the key that opened it
             └─ tools/list, tools/call → Catalog (gateway/catalog.py) → ToolCalls

The principal rides in the ASGI scope (`ator.principal`) to the handlers, which read it
from the request the SDK hands them; the session manager runs in a task of its own for the
runtime's life (`attach` … `close`), so no request's task owns it.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from uuid import UUID

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import Receive, Scope, Send

import ator
from ator.engine.access import Access
from ator.engine.runtime import Ator
from ator.engine.tool_calls import ToolCalls
from ator.gateway.catalog import Catalog
from ator.settings import Settings
from ator.store.records import Principal

__all__ = ["PRINCIPAL_KEY", "McpGateway"]

PRINCIPAL_KEY = "ator.principal"
_WINDOW = 60.0


class McpGateway:
    """The ASGI app of `/mcp` (one per process; `attach` it to the runtime before use)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._server: Server[Any] = Server(
            "ator", version=ator.__version__,
            instructions="The tools of your ator organization.",
            on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        hosts = list(settings.gateway_allowed_hosts)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=bool(hosts), allowed_hosts=hosts,
            allowed_origins=list(settings.gateway_allowed_origins))
        self._manager = StreamableHTTPSessionManager(
            self._server, json_response=True, security_settings=security,
            session_idle_timeout=settings.gateway_session_idle)
        self._ator: Ator | None = None
        self._catalog: Catalog | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def attach(self, runtime: Ator) -> None:
        """Serve `runtime`'s tools; starts the SDK's session manager (once)."""
        self._ator = runtime
        self._catalog = Catalog(runtime.service(ToolCalls))
        if self._task is None:
            started = asyncio.Event()
            self._task = asyncio.create_task(self._run(started), name="mcp-gateway")
            await started.wait()

    async def close(self) -> None:
        """Stop the session manager (every open session ends)."""
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            await task

    async def _run(self, started: asyncio.Event) -> None:
        async with self._manager.run():
            started.set()
            await self._stop.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._ator is None:
            await _reply(send, 503, "unavailable", "the MCP gateway is not attached")
            return
        principal = await self._authenticate(scope)
        if principal is None:
            await _reply(send, 401, "unauthenticated",
                         "an org API key is required (Authorization: Bearer <key>)",
                         [(b"www-authenticate", b'Bearer realm="ator"')])
            return
        limit = self._ator.settings.rate_limit_per_minute
        if limit > 0 and await self._ator.coord.hit(
                f"rl:gateway:{principal.key_id}", _WINDOW) > limit:
            retry = int(_WINDOW - (time.time() % _WINDOW)) + 1
            await _reply(send, 429, "rate_limited", f"more than {limit} requests this minute",
                         [(b"retry-after", str(retry).encode())])
            return
        # The SDK binds a handshake-era session to the credential that opened it: a request
        # of another key for that session is answered as if it did not exist.
        user = AuthenticatedUser(AccessToken(
            token=str(principal.key_id), client_id=str(principal.key_id), scopes=[],
            subject=str(principal.user_id)))
        await self._manager.handle_request(
            {**scope, "user": user, PRINCIPAL_KEY: principal}, receive, send)

    async def _authenticate(self, scope: Scope) -> Principal | None:
        assert self._ator is not None
        auth = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        if auth[:7].lower() != "bearer " or not auth[7:].strip():
            return None
        return await self._ator.service(Access).authenticate(auth[7:].strip())

    def _principal(self, ctx: ServerRequestContext[Any, Any]
                   ) -> tuple[Catalog, Principal, UUID | None]:
        """The catalog, who asks, and the downstream session (handshake era; None in the
        sessionless era): upstream sessions are that session's own."""
        request = ctx.request
        principal = None if request is None else request.scope.get(PRINCIPAL_KEY)
        if request is None or not isinstance(principal, Principal) or self._catalog is None:
            raise MCPError(-32600, "no authenticated principal on this request")
        return self._catalog, principal, _session_id(request.headers.get("mcp-session-id"))

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        catalog, principal, conversation = self._principal(ctx)
        return await catalog.tools(principal, conversation)

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        catalog, principal, conversation = self._principal(ctx)
        return await catalog.call(principal, params.name, params.arguments or {},
                                  conversation)


def _session_id(header: str | None) -> UUID | None:
    """The SDK's session ids are uuid4 hex; anything else names no session of ours."""
    try:
        return None if header is None else UUID(hex=header)
    except ValueError:
        return None


async def _reply(send: Send, status: int, code: str, detail: str,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps({"type": "about:blank", "title": code.replace("_", " "),
                       "status": status, "code": code, "detail": detail}).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})
