"""`/mcp`: an org's tools served to outside MCP clients (layer: gateway; imports mcp, starlette,
engine facades `Access` and `ToolCalls`, gateway.*, settings).

    MCP client ──POST/GET/DELETE /mcp──▶ McpGateway.__call__ (any replica)
        bearer org key → Access.authenticate (401 otherwise), rate limit per key
        handshake era: `Mcp-Session-Id` checked (404 unless live and this key's) or, on
          `initialize`, opened, on the coordinator (gateway/sessions.py); its GET is the
          stream of catalog changes (gateway/changes.py)
        └─ the SDK's StreamableHTTPSessionManager, stateless: the era is picked per request
           from `MCP-Protocol-Version` (2026-07-28: one sessionless POST) and each request is
           served whole, so no replica holds a session the next request needs
             └─ tools/list, tools/call → Catalog (gateway/catalog.py) → ToolCalls
                (+ the org's published workflows, gateway/workflows.py);
                subscriptions/listen → CatalogChanges (2026-07-28's change stream)

Every answer is one key's: `Cache-Control: no-store, private` and `Vary: Authorization`
besides the results' own `cacheScope: "private"`, `ttlMs: 0` (the SDK's cache hints).

The principal and the session ride in the ASGI scope (`ator.principal`,
`ator.conversation`) to the handlers, which read them from the request the SDK hands them;
the session manager runs in a task of its own for the runtime's life (`attach` … `close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from starlette.types import Message, Receive, Scope, Send

import ator
from ator import jsonenc
from ator.engine.access import Access
from ator.engine.approvals import Approvals
from ator.engine.mcp import McpService
from ator.engine.runtime import Ator
from ator.engine.tool_calls import ToolCalls
from ator.errors import ConfigError
from ator.gateway.catalog import Catalog
from ator.gateway.changes import CatalogChanges, StreamsFull
from ator.gateway.errors import refuse, session_not_found
from ator.gateway.sessions import GatewaySessions
from ator.gateway.workflows import WorkflowTools
from ator.settings import Settings
from ator.store.records import Principal
from ator.workflows import Workflows

__all__ = ["PRINCIPAL_KEY", "McpGateway"]

PRINCIPAL_KEY = "ator.principal"
CONVERSATION_KEY = "ator.conversation"  # the gateway session's id (None: sessionless)
_WINDOW = 60.0
_ORG: contextvars.ContextVar[UUID | None] = contextvars.ContextVar("gateway_org", default=None)


class McpGateway:
    """The ASGI app of `/mcp` (one per process; `attach` it to the runtime before use)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._server: Server[Any] = _Server(
            "ator", version=ator.__version__,
            instructions="The tools of your ator organization.",
            on_list_tools=self._list_tools, on_call_tool=self._call_tool,
            on_subscriptions_listen=self._listen,
            # The SDK checks a 2026 call's `Mcp-Param-*` headers against the tool's schema;
            # without this it lists the whole catalog again (a second listing per call).
            get_tool_input_schema=self._header_schema)
        hosts = list(settings.gateway_allowed_hosts)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=bool(hosts), allowed_hosts=hosts,
            allowed_origins=list(settings.gateway_allowed_origins))
        # Stateless: every request is served whole by whichever replica gets it; the
        # handshake era's session is the gateway's own (gateway/sessions.py).
        self._manager = StreamableHTTPSessionManager(
            self._server, json_response=True, stateless=True, security_settings=security)
        self._ator: Ator | None = None
        self._sessions: GatewaySessions | None = None
        self._catalog: Catalog | None = None
        self._changes: CatalogChanges | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def attach(self, runtime: Ator) -> None:
        """Serve `runtime`'s tools; starts the SDK's session manager (once)."""
        self._ator = runtime
        # The org's tools as inside ator, and its published workflows (gateway/workflows.py).
        s = self._settings
        flows: list[WorkflowTools] = []
        forget: list[Callable[[UUID], None]] = []
        with contextlib.suppress(ConfigError):  # an engine without the workflows extension
            flows.append(WorkflowTools(runtime.service(Workflows), wait=s.gateway_workflow_wait,
                                       ttl=s.mcp_catalog_ttl))
            forget.append(flows[0].forget)
        with contextlib.suppress(ConfigError):  # nor MCP: else its servers' cache, too
            forget.append(runtime.service(McpService).recent.drop)
        self._catalog = Catalog(runtime.service(ToolCalls).with_toolsets(flows),
                                runtime.service(Approvals))
        self._sessions = GatewaySessions(runtime.coord, s.gateway_session_idle)
        self._changes = CatalogChanges(runtime.coord, forget=forget)
        if self._task is None:
            started = asyncio.Event()
            self._task = asyncio.create_task(self._run(started), name="mcp-gateway")
            await started.wait()

    @property
    def changes(self) -> CatalogChanges:
        """The catalog-change streams this replica serves (attached first)."""
        assert self._changes is not None, "attach the gateway first"
        return self._changes

    async def close(self) -> None:
        """Stop the session manager (every open session and change stream ends)."""
        if self._changes is not None:
            self._changes.closing.set()
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
            await refuse(send, 503, "unavailable", "the MCP gateway is not attached")
            return
        key = _bearer(scope)
        principal = None if key is None else await self._ator.service(Access).authenticate(key)
        if principal is None:
            await refuse(send, 401, "unauthenticated",
                         "an org API key is required (Authorization: Bearer <key>)"
                         if key is None else "the API key is not valid, expired or was revoked",
                         [(b"www-authenticate", b'Bearer realm="ator"')])
            return
        # The API's limiter (on the coordinator, shared by every replica), counted per key.
        limit = self._ator.settings.rate_limit_per_minute
        if limit > 0 and await self._ator.count_hit(
                f"rl:key:{principal.key_id}", _WINDOW) > limit:
            retry = int(_WINDOW - (time.time() % _WINDOW)) + 1
            await refuse(send, 429, "rate_limited",
                         f"this key made more than {limit} requests this minute; retry in "
                         f"{retry} s", [(b"retry-after", str(retry).encode())],
                         retry_after=retry, limit=limit)
            return
        await self._serve(scope, receive, _private(send), principal)

    async def _serve(self, scope: Scope, receive: Receive, send: Send,
                     principal: Principal) -> None:
        """The session (handshake era) checked or opened, then the SDK serves the request."""
        assert self._sessions is not None
        headers = dict(scope.get("headers") or [])
        named = headers.get(b"mcp-session-id", b"").decode("latin-1") or None
        session: UUID | None = None
        if named is not None:
            session = await self._sessions.touch(named, principal.key_id)
            if session is None:  # unknown, expired, ended, or another key's
                await session_not_found(send)
                return
            if scope["method"] == "DELETE":
                await self._sessions.close(session, principal.key_id)
                await send({"type": "http.response.start", "status": 204, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            if scope["method"] == "GET":  # the session's standing stream: catalog changes
                await self._stream(principal, session, receive, send)
                return
        elif scope["method"] == "POST" and b"mcp-protocol-version" not in headers:
            receive, method = await _peek_method(receive)
            if method == "initialize":
                session = await self._sessions.open(principal.key_id)
                send = _with_header(send, b"mcp-session-id", session.hex.encode())
        _ORG.set(principal.org_id)  # for `_header_schema`, which the SDK calls bare
        await self._manager.handle_request(
            {**scope, PRINCIPAL_KEY: principal, CONVERSATION_KEY: session}, receive, send)

    async def _stream(self, principal: Principal, session: UUID, receive: Receive,
                      send: Send) -> None:
        assert self._changes is not None and self._sessions is not None
        sessions = self._sessions

        async def alive() -> bool:
            return await sessions.touch(session.hex, principal.key_id) is not None

        try:
            await self._changes.stream(principal.org_id, receive, send, alive)
        except StreamsFull as exc:
            await refuse(send, 429, "rate_limited", str(exc))

    def _principal(self, ctx: ServerRequestContext[Any, Any]
                   ) -> tuple[Catalog, Principal, UUID | None]:
        """The catalog, who asks, and the downstream session (handshake era; None in the
        sessionless era): upstream sessions are that session's own."""
        request = ctx.request
        principal = None if request is None else request.scope.get(PRINCIPAL_KEY)
        if request is None or not isinstance(principal, Principal) or self._catalog is None:
            raise MCPError(-32600, "no authenticated principal on this request")
        return self._catalog, principal, request.scope.get(CONVERSATION_KEY)

    async def _list_tools(self, ctx: ServerRequestContext[Any, Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        catalog, principal, conversation = self._principal(ctx)
        return await catalog.tools(principal, conversation)

    def _header_schema(self, name: str) -> dict[str, Any] | None:
        org_id = _ORG.get()
        if self._catalog is None or org_id is None:
            return None
        return self._catalog.header_schema(org_id, name)

    async def _listen(self, ctx: ServerRequestContext[Any, Any],
                      params: types.SubscriptionsListenRequestParams
                      ) -> types.SubscriptionsListenResult:
        _, principal, _ = self._principal(ctx)
        assert self._changes is not None
        return await self._changes.listen(principal.org_id, ctx, params)

    async def _call_tool(self, ctx: ServerRequestContext[Any, Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        catalog, principal, conversation = self._principal(ctx)
        return await catalog.call(principal, params.name, params.arguments or {},
                                  conversation)


def _bearer(scope: Scope) -> str | None:
    raw: bytes = dict(scope.get("headers") or []).get(b"authorization", b"")
    auth = raw.decode("latin-1")
    if auth[:7].lower() != "bearer " or not auth[7:].strip():
        return None
    return auth[7:].strip()


class _Server(Server[Any]):
    """The SDK's low-level server telling handshake-era clients that the tool list changes
    (the stateless manager asks for the default options, which say it does not)."""

    def create_initialization_options(
        self, notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities, extensions)


def _private(send: Send) -> Send:
    """Every answer is one key's: never stored by a shared cache (the results' own hint is
    `cacheScope: "private"`, `ttlMs: 0`)."""
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            if not any(k.lower() == b"cache-control" for k, _ in headers):
                headers.append((b"cache-control", b"no-store, private"))
            headers.append((b"vary", b"authorization"))
            message = {**message, "headers": headers}
        await send(message)

    return wrapped


async def _peek_method(receive: Receive) -> tuple[Receive, str | None]:
    """The JSON-RPC method of the request's body (None when it is not one request), and a
    `receive` that replays the body to the SDK. The body limit (api.limits) has bounded it."""
    messages: list[Message] = []
    body = b""
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    try:
        parsed = jsonenc.loads(body)
    except ValueError:
        parsed = None
    method = parsed.get("method") if isinstance(parsed, dict) else None

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    return replay, method if isinstance(method, str) else None


def _with_header(send: Send, name: bytes, value: bytes) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 200:
            message = {**message, "headers": [*message.get("headers", []), (name, value)]}
        await send(message)

    return wrapped
