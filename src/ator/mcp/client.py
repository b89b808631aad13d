"""One live connection to one MCP server, on the official `mcp` SDK (layer: mcp, beside tools;
imports mcp, httpx2, errors, net).

`McpSession.open(endpoint, egress)` connects with era negotiation `auto` (the SDK probes
`server/discover` for the 2026-07-28 stateless era and falls back to the `initialize`
handshake of 2024-11-05 … 2025-11-25), over Streamable HTTP, falling back to the legacy
HTTP+SSE transport when the URL does not speak Streamable HTTP; or over stdio for an
operator's command. Every HTTP connection is made by a client from `Egress.httpx2_client`,
so the egress guard judges each one (the SDK never builds its own).

The SDK's client lives in anyio task groups that must be entered and left by one task, so a
session owns a background task that holds the connection open until `aclose()`; calls are
made from any task. Failures are mapped once, here, to `McpError` codes (or `EgressBlocked`):
`McpSession.lost` tells whether the connection is dead (an expired session, a dead stream)
so the pool reconnects, while a failed call on a healthy session leaves it in place.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx2
import mcp_types as types
from mcp.client.client import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from ator.errors import AtorError, EgressBlocked, McpError
from ator.net.egress import Egress
from ator.net.guard import egress_refusal

__all__ = ["CLIENT_VERSIONS", "McpEndpoint", "McpSession", "RemoteTool", "map_failure"]

log = logging.getLogger(__name__)

CLIENT_VERSIONS: tuple[str, ...] = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
_UNSUPPORTED_VERSION = -32022
_SESSION_GONE = ("Session terminated", "Session not found", "SSE stream",
                 "Connection closed", "connection closed")


@dataclass(frozen=True, slots=True)
class McpEndpoint:
    """Where a server is and how to reach it, with its secrets already resolved.
    `transport` is "http" (Streamable HTTP, legacy SSE fallback) or "stdio"."""

    name: str
    transport: str
    url: str | None = None
    command: tuple[str, ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class RemoteTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool

    @property
    def size(self) -> int:
        """Characters its definition costs (name + description + schema)."""
        return len(self.name) + len(self.description) + len(json.dumps(self.input_schema))

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "input_schema": self.input_schema, "read_only": self.read_only,
                "size": self.size}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> RemoteTool:
        return cls(str(data["name"]), str(data.get("description") or ""),
                   dict(data.get("input_schema") or {"type": "object"}),
                   bool(data.get("read_only")))


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def map_failure(exc: BaseException, endpoint: McpEndpoint, *, status: int | None = None,
                timeout: float | None = None) -> AtorError:
    """The one mapping of what the SDK and the transport raise to a legible error."""
    leaves = _leaves(exc)
    for leaf in leaves:
        if (blocked := egress_refusal(leaf)) is not None:
            return blocked
        if isinstance(leaf, McpError):
            return leaf
    if status in (401, 403):
        return McpError(f"MCP server {endpoint.name!r} refused our credentials (HTTP {status}); "
                        "check the server's token or headers", code="mcp_auth_failed",
                        facts={"status": status})
    for leaf in leaves:
        if isinstance(leaf, TimeoutError):
            return McpError(f"MCP server {endpoint.name!r} did not answer within "
                            f"{timeout or endpoint.timeout:g}s", code="mcp_timeout",
                            facts={"timeout_s": timeout or endpoint.timeout}, retryable=True)
        if isinstance(leaf, MCPError) and leaf.code == _UNSUPPORTED_VERSION:
            data = leaf.error.data if isinstance(leaf.error.data, dict) else {}
            supported = list(data.get("supported") or [])
            return McpError(
                f"MCP server {endpoint.name!r} supports protocol versions "
                f"{', '.join(supported) or 'unknown'}; ator supports {', '.join(CLIENT_VERSIONS)}",
                code="mcp_protocol_unsupported",
                facts={"server_supports": supported, "client_supports": list(CLIENT_VERSIONS)})
    if status is not None and status >= 400:
        return McpError(f"MCP server {endpoint.name!r} answered HTTP {status}",
                        code="mcp_http_status", facts={"status": status})
    first = leaves[0]
    return McpError(f"MCP server {endpoint.name!r} is unavailable: {type(first).__name__}: "
                    f"{first}"[:500], code="mcp_server_unavailable", retryable=True)


class _StatusWatch:
    """Remembers the last HTTP error status a connection's client saw (the SDK turns it into
    a generic JSON-RPC error; the status is what the reader can act on)."""

    def __init__(self) -> None:
        self.status: int | None = None

    async def __call__(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.status = response.status_code


class McpSession:
    """A connected MCP client; use `McpSession.open` and `aclose`."""

    def __init__(self, endpoint: McpEndpoint, egress: Egress | None) -> None:
        self.endpoint = endpoint
        self._egress = egress
        self._watch = _StatusWatch()
        self._client: Client | None = None
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.transport = ""  # "streamable_http", "sse" or "stdio" once connected
        self.lost = False
        self.calls = 0

    # Connecting ----------------------------------------------------------------------

    @classmethod
    async def open(cls, endpoint: McpEndpoint, egress: Egress | None) -> McpSession:
        """Connect and negotiate. Raises McpError / EgressBlocked."""
        self = cls(endpoint, egress)
        if endpoint.transport == "http" and endpoint.url and egress is not None:
            egress.guard.check_url(endpoint.url)  # any spelling of an address, before DNS
        transports = self._transports()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold(ready, transports),
                                         name=f"mcp:{endpoint.name}")
        try:
            async with asyncio.timeout(endpoint.timeout):
                await asyncio.shield(ready)
        except BaseException as exc:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise map_failure(exc, endpoint, status=self._watch.status) from None
        return self

    def _http_client(self, headers: Mapping[str, str] | None = None) -> httpx2.AsyncClient:
        if self._egress is None:
            raise McpError("no egress guard for an HTTP MCP server",
                           code="mcp_transport_unsupported")
        client = self._egress.httpx2_client(
            headers={**self.endpoint.headers, **(headers or {})},
            secret_headers=self.endpoint.headers.keys(),
        )
        client.event_hooks["response"].append(self._watch)
        return client

    def _transports(self) -> list[tuple[str, AbstractAsyncContextManager[Any]]]:
        e = self.endpoint
        if e.transport == "stdio":
            if not e.command:
                raise McpError(f"MCP server {e.name!r} has no command",
                               code="mcp_server_unavailable")
            params = StdioServerParameters(command=e.command[0], args=list(e.command[1:]))
            return [("stdio", stdio_client(params))]
        if e.transport != "http" or not e.url:
            raise McpError(f"transport {e.transport!r} is not supported for {e.name!r}",
                           code="mcp_transport_unsupported",
                           facts={"supported": ["http", "stdio"]})
        return [("streamable_http", self._streamable(e.url)), ("sse", self._sse(e.url))]

    @asynccontextmanager
    async def _streamable(self, url: str) -> AsyncIterator[Any]:
        async with self._http_client() as client, \
                streamable_http_client(url, http_client=client) as streams:
            yield streams

    def _sse(self, url: str) -> AbstractAsyncContextManager[Any]:
        def factory(headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None,
                    auth: httpx2.Auth | None = None) -> httpx2.AsyncClient:
            return self._http_client(headers)

        return sse_client(url, timeout=self.endpoint.timeout, httpx_client_factory=factory)

    async def _hold(self, ready: asyncio.Future[None],
                    transports: list[tuple[str, AbstractAsyncContextManager[Any]]]) -> None:
        failure: BaseException | None = None
        for name, transport in transports:
            self._watch.status = None
            try:
                async with Client(transport, mode="auto",
                                  read_timeout_seconds=self.endpoint.timeout) as client:
                    self._client = client
                    self.transport = name
                    ready.set_result(None)
                    await self._closing.wait()
                    return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if ready.done():  # the connection died after it was up
                    self.lost = True
                    log.info("MCP server %s: connection ended: %r", self.endpoint.name, exc)
                    return
                failure = exc
                if not self._may_fall_back(exc):
                    break
        self.lost = True
        if not ready.done():
            ready.set_exception(failure or McpError("no transport", code="mcp_server_unavailable"))

    def _may_fall_back(self, exc: BaseException) -> bool:
        """Streamable HTTP refused in a way a legacy SSE server would refuse it (a 4xx other
        than auth, or the POST not being understood); not for refusals and timeouts."""
        mapped = map_failure(exc, self.endpoint, status=self._watch.status)
        if isinstance(mapped, EgressBlocked):
            return False
        if mapped.code in ("mcp_auth_failed", "mcp_timeout", "mcp_protocol_unsupported"):
            return False
        return self._watch.status in (400, 404, 405) or mapped.code == "mcp_server_unavailable"

    # Using ---------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None or self.lost or self._closing.is_set():
            raise McpError(f"MCP session to {self.endpoint.name!r} is closed",
                           code="mcp_session_restarted")
        return self._client

    @property
    def era(self) -> str:
        return self.client.protocol_version

    @property
    def server_info(self) -> dict[str, str | None]:
        info = self.client.server_info
        return {"name": info.name if info else None, "version": info.version if info else None}

    async def list_tools(self) -> list[RemoteTool]:
        out: list[RemoteTool] = []
        cursor: str | None = None
        for _ in range(100):  # a paginator that never ends cannot hang us
            page = await self._guarded(self.client.list_tools(cursor=cursor))
            for t in page.tools:
                hint = t.annotations.read_only_hint if t.annotations else None
                out.append(RemoteTool(t.name, t.description or "", dict(t.input_schema),
                                      bool(hint)))
            cursor = page.next_cursor
            if not cursor:
                break
        return out

    async def call(self, name: str, arguments: Mapping[str, Any],
                   timeout: float | None = None) -> types.CallToolResult:
        """Call a tool. Raises McpError (code mcp_session_restarted when the session turned
        out to be dead: `lost` is then set) or EgressBlocked."""
        self.calls += 1
        result = await self._guarded(self.client.call_tool(name, dict(arguments)), timeout)
        assert isinstance(result, types.CallToolResult)
        return result

    async def _guarded(self, work: Any, timeout: float | None = None) -> Any:
        limit = timeout or self.endpoint.timeout
        self._watch.status = None
        try:
            async with asyncio.timeout(limit):
                return await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._is_gone(exc):
                self.lost = True
                raise McpError(
                    f"the MCP session to {self.endpoint.name!r} ended (expired or its stream "
                    "died); it will reconnect on the next call",
                    code="mcp_session_restarted") from None
            raise map_failure(exc, self.endpoint, status=self._watch.status,
                              timeout=limit) from None

    def _is_gone(self, exc: BaseException) -> bool:
        if self.lost or (self._task is not None and self._task.done()):
            return True
        if self._watch.status == 404:
            return True
        return any(isinstance(leaf, MCPError) and any(s in leaf.error.message
                                                     for s in _SESSION_GONE)
                   for leaf in _leaves(exc))

    async def aclose(self) -> None:
        self._closing.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            async with asyncio.timeout(5):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def describe(tools: Sequence[RemoteTool]) -> list[dict[str, Any]]:
    return [t.record() for t in tools]
