"""MCP sessions pooled per (org, server, conversation root) (layer: mcp; imports mcp.client,
errors, net).

A conversation — a root thread and the subagents under it — gets its own upstream session
per server, never shared with another conversation or org. Sessions idle longer than the
TTL are closed; past the global or the per-org cap, the least recently used is closed to
make room. A failed call leaves a healthy session in place; a session found dead (expired,
its stream gone) is dropped, and the call is retried once on a fresh session only when the
tool is read-only — otherwise the caller is told the session restarted and the effect may or
may not have happened (code `mcp_session_restarted`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import mcp_types as types

from ator.errors import McpError
from ator.mcp.client import McpEndpoint, McpSession, RemoteTool
from ator.net.egress import Egress

__all__ = ["McpPool", "SessionKey"]


@dataclass(frozen=True, slots=True)
class SessionKey:
    org_id: UUID
    server_id: UUID
    root_id: UUID  # the root thread of the conversation (itself for a root thread)


class McpPool:
    def __init__(
        self,
        egress: Egress | None,
        *,
        idle_ttl: float = 300.0,
        max_sessions: int = 500,
        max_per_org: int = 50,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._egress = egress
        self.idle_ttl = idle_ttl
        self.max_sessions = max_sessions
        self.max_per_org = max_per_org
        self._clock = clock
        self._sessions: OrderedDict[SessionKey, tuple[McpSession, float]] = OrderedDict()
        self._locks: dict[SessionKey, asyncio.Lock] = {}
        self.opened = 0  # sessions ever connected (tests and metrics)

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, key: object) -> bool:
        return key in self._sessions

    def keys(self) -> list[SessionKey]:
        return list(self._sessions)

    async def session(self, key: SessionKey, endpoint: McpEndpoint) -> McpSession:
        """The live session for `key`, connecting one if there is none (or it died)."""
        await self._sweep()
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            found = self._sessions.get(key)
            if found is not None and not found[0].lost and found[0].endpoint == endpoint:
                self._sessions[key] = (found[0], self._clock())
                self._sessions.move_to_end(key)
                return found[0]
            if found is not None:
                await self._drop(key)
            await self._make_room(key.org_id)
            session = await McpSession.open(endpoint, self._egress)
            self.opened += 1
            self._sessions[key] = (session, self._clock())
            return session

    async def list_tools(self, key: SessionKey, endpoint: McpEndpoint) -> list[RemoteTool]:
        """The server's tools on `key`'s session. Listing changes nothing, so a session found
        dead is replaced and the listing retried once, like a read-only call."""
        session = await self.session(key, endpoint)
        try:
            return await session.list_tools()
        except McpError as exc:
            if exc.code != "mcp_session_restarted":
                raise
            await self._drop(key, session)
        return await (await self.session(key, endpoint)).list_tools()

    async def call(
        self,
        key: SessionKey,
        endpoint: McpEndpoint,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        read_only: bool,
        timeout: float | None = None,
    ) -> types.CallToolResult:
        session = await self.session(key, endpoint)
        try:
            return await session.call(tool, arguments, timeout)
        except McpError as exc:
            if exc.code != "mcp_session_restarted":
                raise  # a failed call does not evict a healthy session
            await self._drop(key, session)
            if not read_only:
                raise McpError(
                    f"the MCP session to {endpoint.name!r} ended during this call and was "
                    f"restarted; {tool!r} is not read-only, so it was not retried: its effect "
                    "may or may not have happened. Check before calling it again.",
                    code="mcp_session_restarted", facts={"retried": False}) from None
        fresh = await self.session(key, endpoint)
        return await fresh.call(tool, arguments, timeout)

    async def _drop(self, key: SessionKey, only: McpSession | None = None) -> None:
        found = self._sessions.get(key)
        if found is None or (only is not None and found[0] is not only):
            return
        del self._sessions[key]
        await found[0].aclose()

    async def _make_room(self, org_id: UUID) -> None:
        mine = [k for k in self._sessions if k.org_id == org_id]
        while len(mine) >= self.max_per_org:
            await self._drop(mine.pop(0))
        while len(self._sessions) >= self.max_sessions:
            await self._drop(next(iter(self._sessions)))

    async def _sweep(self) -> None:
        now = self._clock()
        stale = [k for k, (s, used) in self._sessions.items()
                 if s.lost or now - used > self.idle_ttl]
        for key in stale:
            await self._drop(key)

    async def aclose(self) -> None:
        for key in list(self._sessions):
            await self._drop(key)
