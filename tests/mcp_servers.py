"""Real MCP servers for tests, built with the `mcp` SDK's server side and served by uvicorn on
loopback ports (127.0.0.1 only).

    async with serve_mcp(demo_server(), era="dual") as url: ...

Eras: "dual" (the SDK's Streamable HTTP app as is: it answers both eras), "modern" (2026-07-28
only: `initialize` and handshake-era version headers are refused), "handshake" (handshake
eras only: `server/discover` is answered HTTP 400 like a pre-2026 server), "sse" (the legacy
HTTP+SSE transport). `hang` is an event the `hang` tool waits on; `state` counts what the
server saw (calls per tool, distinct sessions).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["ServerState", "counter_server", "demo_server", "serve_mcp"]


@dataclass
class ServerState:
    calls: dict[str, int] = field(default_factory=dict)
    sessions: set[int] = field(default_factory=set)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    seen_ids: set[str] = field(default_factory=set)  # mcp-session-id headers seen
    expired_ids: set[str] = field(default_factory=set)

    def expire_all(self) -> None:
        """Expire every session seen so far: the server answers them 404 from now on."""
        self.expired_ids |= self.seen_ids

    def saw(self, tool: str, ctx: Context | None = None) -> None:
        self.calls[tool] = self.calls.get(tool, 0) + 1
        if ctx is not None:
            with contextlib.suppress(Exception):
                self.sessions.add(id(ctx.session))


def demo_server(name: str = "demo", state: ServerState | None = None,
                big_chars: int = 200_000, long_description: int = 0) -> MCPServer:
    st = state or ServerState()
    server = MCPServer(name)

    @server.tool(description="Echo the text back.",
                 annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str, ctx: Context) -> str:
        st.saw("echo", ctx)
        return f"echo: {text}"

    @server.tool(description="Record a write (not read-only).")
    def write(value: str, ctx: Context) -> str:
        st.saw("write", ctx)
        return f"wrote {value}"

    @server.tool(description="Return a large text result.",
                 annotations=ToolAnnotations(read_only_hint=True))
    def big() -> str:
        st.saw("big")
        return "".join(f"{i:07d}\n" for i in range(big_chars // 8))

    @server.tool(description="Wait until the test releases it.")
    async def hang() -> str:
        st.saw("hang")
        await st.release.wait()
        return "released"

    if long_description:
        @server.tool(description="x" * long_description)
        def verbose() -> str:
            return "ok"

    return server


def counter_server(name: str = "counter") -> MCPServer:
    """A stateful server: `bump` counts calls per session (by its `Mcp-Session-Id`), so two
    clients sharing one upstream session would see each other's counts."""
    server = MCPServer(name)
    counts: dict[str, int] = {}

    @server.tool(description="Count one more in this session; answers the count.")
    def bump(ctx: Context) -> str:
        session = (ctx.headers or {}).get("mcp-session-id", "")
        counts[session] = counts.get(session, 0) + 1
        return str(counts[session])

    return server


def _modern_only(app: ASGIApp) -> ASGIApp:
    """Refuse the handshake eras the way a 2026-07-28-only server does (-32022 naming its
    versions)."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await app(scope, receive, send)
        body, more = b"", True
        messages = []
        while more:
            m = await receive()
            messages.append(m)
            body += m.get("body", b"")
            more = m.get("more_body", False)
        try:
            msg = json.loads(body)
        except ValueError:
            msg = {}
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            payload = json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "error": {
                "code": -32022, "message": "Unsupported protocol version",
                "data": {"supported": ["2026-07-28"],
                         "requested": msg.get("params", {}).get("protocolVersion")}}}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": payload})
            return None
        replay = iter(messages)

        async def again() -> Any:
            replayed = next(replay, None)
            return replayed if replayed is not None else await receive()
        return await app(scope, again, send)
    return wrapped


def _handshake_only(app: ASGIApp) -> ASGIApp:
    """A pre-2026 Streamable HTTP server: `server/discover` is a 400."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope.get("headers") or [])
            version = headers.get(b"mcp-protocol-version", b"").decode()
            if version.startswith("2026"):
                await send({"type": "http.response.start", "status": 400,
                            "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"Bad Request"})
                return
        await app(scope, receive, send)
    return wrapped


def _expiring(app: ASGIApp, state: ServerState) -> ASGIApp:
    """A handshake-era server whose sessions expire when the test says so: a request on an
    expired session id is answered 404 "Session not found", as the SDK's server does."""
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            sid = dict(scope.get("headers") or []).get(b"mcp-session-id", b"").decode()
            if sid:
                state.seen_ids.add(sid)
            if sid and sid in state.expired_ids:
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
                    "code": -32600, "message": "Session not found"}}).encode()
                await send({"type": "http.response.start", "status": 404,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)
    return wrapped


def _refuse_versions(supported: list[str]) -> ASGIApp:
    """A server of an era ator does not speak: every request is -32022 naming its versions."""
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            m = await receive()
            body += m.get("body", b"")
            more = m.get("more_body", False)
        msg = json.loads(body or b"{}")
        payload = json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "error": {
            "code": -32022, "message": "Unsupported protocol version",
            "data": {"supported": supported, "requested": "?"}}}).encode()
        await send({"type": "http.response.start", "status": 400,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": payload})
    return app


def _status(code: int) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await send({"type": "http.response.start", "status": code,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"nope"})
    return app


@contextlib.asynccontextmanager
async def serve_app(app: ASGIApp) -> AsyncIterator[int]:
    """Serve `app` on a loopback socket that is listening before this yields (connections
    wait in its backlog until uvicorn accepts them: nothing to poll for)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(app, log_level="warning", lifespan="auto",
                            timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield port
    finally:
        server.should_exit = True
        async with asyncio.timeout(15):
            await task
        sock.close()


@contextlib.asynccontextmanager
async def serve_mcp(server: MCPServer | None = None, *, era: str = "dual",
                    status: int | None = None, state: ServerState | None = None,
                    **app_options: Any) -> AsyncIterator[str]:
    """Serve on 127.0.0.1 and yield the URL a client registers. era "future" speaks only a
    protocol version from after ator's; "expiring" is "handshake" whose sessions expire on
    `state.expire_all()`."""
    if era == "future":
        async with serve_app(_refuse_versions(["2099-01-01"])) as port:
            yield f"http://127.0.0.1:{port}/mcp"
        return
    if status is not None:
        async with serve_app(_status(status)) as port:
            yield f"http://127.0.0.1:{port}/mcp"
        return
    assert server is not None
    if era == "sse":
        async with serve_app(server.sse_app()) as port:
            yield f"http://127.0.0.1:{port}/sse"
        return
    base = server.streamable_http_app(**app_options)
    st = state or ServerState()
    wrap: dict[str, Callable[[ASGIApp], ASGIApp]] = {
        "modern": _modern_only, "handshake": _handshake_only, "dual": lambda a: a,
        "expiring": lambda a: _expiring(_handshake_only(a), st)}
    app = wrap[era](base)
    if app is not base:
        inner = app

        async def with_lifespan(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "lifespan":
                await base(scope, receive, send)
            else:
                await inner(scope, receive, send)
        app = with_lifespan
    async with serve_app(app) as port:
        yield f"http://127.0.0.1:{port}/mcp"


Probe = Callable[[str], Awaitable[Any]]
