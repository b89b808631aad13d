"""The org's MCP tools as a per-turn `Toolset` (layer: mcp; imports tools.base, tools.failure,
mcp.client, mcp.pool, errors).

Each server's tools are mounted as `server__tool` (origin `mcp:<server>`), filtered by the
server's allow/deny globs (on the tool's own name or its mounted name). Descriptions are
capped and prefixed with their origin: they are data from outside, and so is every result
(untrusted, labelled by `tools.base.result_block`). Two tools that resolve to one mounted
name are not mounted silently over each other: the later one is refused and the refusal is
kept in `problems`. A server that cannot be reached is left out of the turn (its error is in
`problems`) and never blocks the others. Above `search_threshold` tools, the turn mounts
`tool_search` instead, and what it finds from the next model call on (mcp/search.py).
Non-text content (images, resources, structured content) is carried as text the model can
read, not dropped.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import json
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol
from uuid import UUID

import mcp_types as types

from ator.errors import AtorError
from ator.mcp.client import McpEndpoint, RemoteTool
from ator.mcp.pool import McpPool, SessionKey
from ator.mcp.search import ToolIndex, search_tool
from ator.tools.base import Tool, ToolContext, ToolResult
from ator.tools.failure import failure
from ator.tools.toolset import LeftOut, OrgToolScope, ToolScope

__all__ = ["McpCatalog", "McpToolset", "MountedServer", "mounted_name", "render_result"]

_NAME_OK = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64
_CALLER_NS = uuid.UUID("0f4a7d52-3c1e-4b8e-9a61-6a7465776179")  # a caller's own sessions


@dataclass(frozen=True, slots=True)
class MountedServer:
    """One enabled server of an org as a turn sees it (secrets resolved)."""

    id: UUID
    endpoint: McpEndpoint
    tools: Sequence[RemoteTool] | None  # the stored catalog; None: discover live
    allow: Sequence[str] | None = None
    deny: Sequence[str] = ()
    alias: str | None = None

    @property
    def namespace(self) -> str:
        return self.alias or self.endpoint.name


class McpCatalog(Protocol):
    async def mounted(self, org_id: UUID) -> Sequence[MountedServer]:
        """The org's enabled MCP servers."""
        ...


def mounted_name(namespace: str, tool: str) -> str:
    return _NAME_OK.sub("_", f"{namespace}__{tool}")[:MAX_NAME]


def _allowed(server: MountedServer, tool: str, name: str) -> bool:
    def hit(globs: Sequence[str]) -> bool:
        return any(fnmatch.fnmatchcase(tool, g) or fnmatch.fnmatchcase(name, g) for g in globs)

    if server.allow is not None and not hit(server.allow):
        return False
    return not hit(server.deny)


def render_result(result: types.CallToolResult) -> tuple[str, dict[str, Any]]:
    """A tool result as text, every content block carried. Returns (text, meta)."""
    parts: list[str] = []
    kinds: list[str] = []
    for block in result.content:
        kinds.append(block.type)
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            size = len(base64.b64decode(block.data, validate=False)) if block.data else 0
            parts.append(f"[{block.type} {block.mime_type}, {size} bytes]")
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            else:
                parts.append(f"[resource {res.uri}, {res.mime_type or 'binary'}]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link {block.uri}: {block.name}]")
        else:
            parts.append(json.dumps(block.model_dump(mode="json"), ensure_ascii=False))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts), {"content_types": kinds}


@dataclass
class _Turn:
    """What one turn mounts: every MCP tool, and in search mode the index and the tools
    searches activated so far. `offered` keeps its identity until it changes."""

    all: tuple[Tool, ...]
    index: ToolIndex | None
    active: dict[str, Tool]
    offered: tuple[Tool, ...]


@dataclass
class McpToolset:
    """Mounts the org's MCP tools for each turn (one catalog read per turn)."""

    catalog: McpCatalog
    pool: McpPool
    description_chars: int = 2_000
    schema_chars: int = 16_000  # a larger input schema is not mounted (it cannot be cut)
    # Offered with the MCP tools when there are any (read_tool_result pages stored results).
    companions: Sequence[Tool] = ()
    # Above this many MCP tools, mount tool_search instead of them all (None: never).
    search_threshold: int | None = None
    name: str = "mcp"
    problems: dict[UUID, list[str]] = field(default_factory=dict)
    _turns: OrderedDict[UUID, _Turn] = field(default_factory=OrderedDict)
    # Outside a turn every call asks for the tools again: a live listing is reused this
    # long per upstream session, so a call is one upstream round trip, not two.
    listing_ttl: float = 5.0
    _listed: OrderedDict[SessionKey, tuple[float, Sequence[RemoteTool]]] = field(
        default_factory=OrderedDict)
    # The tools built for those calls, by session and name, reused while their server and
    # listing are the same objects (the catalog's and the listing's caches hand back the
    # same ones until they refresh): a call then builds no tool, and the registry finds
    # the validator it compiled before by the tool's identity, not its schema's JSON.
    _org_built: OrderedDict[tuple[SessionKey, str], tuple[MountedServer, RemoteTool, Tool]] = (
        field(default_factory=OrderedDict))

    async def tools(self, scope: ToolScope) -> Sequence[Tool]:
        turn = self._turns.get(scope.turn_id)
        if turn is None:
            turn = await self._mount(scope)
            self._turns[scope.turn_id] = turn
            while len(self._turns) > 256:
                old, _ = self._turns.popitem(last=False)
                self.problems.pop(old, None)
        return turn.offered

    def _activate(self, ctx: ToolContext, query: str, k: int) -> list[Tool]:
        turn = None if ctx.turn_id is None else self._turns.get(ctx.turn_id)
        if turn is None or turn.index is None:
            return []
        found = turn.index.search(query, k)
        if any(t.name not in turn.active for t in found):
            # Appended in activation order: the tools already sent keep their place, so the
            # request's tool list changes only at its end.
            for t in found:
                turn.active.setdefault(t.name, replace(t, on_demand=True))
            turn.offered = (self._search, *turn.active.values(), *self.companions)
        return found

    def __post_init__(self) -> None:
        self._search = search_tool(self._activate)

    async def _mount(self, scope: ToolScope) -> _Turn:
        servers = await self.catalog.mounted(scope.org_id)
        root = scope.root_id or scope.thread_id
        problems: list[str] = []
        listed = await asyncio.gather(*(self._list(s, scope.org_id, root, problems)
                                        for s in servers))
        out: dict[str, Tool] = {}
        for server, remote in zip(servers, listed, strict=True):
            key = SessionKey(scope.org_id, server.id, root)
            for r in remote:
                name = mounted_name(server.namespace, r.name)
                if not _allowed(server, r.name, name):
                    continue
                if len(json.dumps(r.input_schema)) > self.schema_chars:
                    problems.append(f"tool {name!r} was not mounted: its input schema is "
                                    f"over {self.schema_chars} characters")
                    continue
                tool = self._tool(server, key, r, name)
                if name in out:
                    if out[name].input_schema != tool.input_schema:
                        problems.append(f"tool {name!r} from {server.endpoint.name!r} was not "
                                        f"mounted: another tool already has that name")
                    continue
                out[name] = tool
        tools = tuple(out.values())
        self.problems[scope.turn_id] = problems
        if self.search_threshold is not None and len(tools) > self.search_threshold:
            return _Turn(tools, ToolIndex(tools), {}, (self._search, *self.companions))
        if tools:
            tools += tuple(t for t in self.companions if t.name not in out)
        return _Turn(tools, None, {}, tools)

    async def _list(self, server: MountedServer, org_id: UUID, root: UUID,
                    problems: list[str]) -> Sequence[RemoteTool]:
        if server.tools is not None:
            return server.tools
        try:
            return await self.pool.list_tools(SessionKey(org_id, server.id, root),
                                              server.endpoint)
        except AtorError as exc:
            problems.append(f"MCP server {server.endpoint.name!r} left out: [{exc.code}] "
                            f"{exc.message}")
            return ()

    async def org_tools(self, scope: OrgToolScope) -> Sequence[Tool]:
        """Outside a turn (the MCP gateway): every enabled server's tools, named
        `<server id>__<tool>` by the first 8 hex digits of the server's id, which a rename
        never changes and two servers of one org share only by a collision that is refused
        (left out with `mcp_tool_name_taken`), never overwritten. Sessions are the caller's
        conversation's own (`scope.conversation`; without one, the caller's). A server that
        cannot be reached is left out with its code; the others are still offered."""
        root = scope.conversation or uuid.uuid5(_CALLER_NS, f"{scope.caller.kind}:"
                                                            f"{scope.caller.id}")
        servers = await self.catalog.mounted(scope.org_id)
        failures: list[tuple[MountedServer, AtorError]] = []
        listed = await asyncio.gather(*(self._org_list(s, scope.org_id, root, failures)
                                        for s in servers))
        for server, exc in failures:
            scope.left_out.append(LeftOut(f"mcp:{server.id}", exc.code,
                                          f"MCP server {server.endpoint.name!r} left out: "
                                          f"{exc.message}"))
        out: dict[str, Tool] = {}
        for server, remote in zip(servers, listed, strict=True):
            key = SessionKey(scope.org_id, server.id, root)
            for r in remote:
                name = mounted_name(server.id.hex[:8], r.name)
                if not _allowed(server, r.name, name):
                    continue
                if name in out:
                    scope.left_out.append(LeftOut(
                        f"mcp:{server.id}", "mcp_tool_name_taken",
                        f"tool {r.name!r} of {server.endpoint.name!r} was left out: another "
                        f"tool already has the name {name!r}"))
                    continue
                out[name] = self._org_tool(server, key, r, name)
        return tuple(out.values())

    def _org_tool(self, server: MountedServer, key: SessionKey, remote: RemoteTool,
                  name: str) -> Tool:
        built = self._org_built.get((key, name))
        if built is not None and built[0] is server and built[1] is remote:
            return built[2]
        tool = self._tool(server, key, remote, name)
        self._org_built[(key, name)] = (server, remote, tool)
        self._org_built.move_to_end((key, name))
        while len(self._org_built) > 4096:
            self._org_built.popitem(last=False)
        return tool

    async def _org_list(self, server: MountedServer, org_id: UUID, root: UUID,
                        failures: list[tuple[MountedServer, AtorError]]
                        ) -> Sequence[RemoteTool]:
        if server.tools is not None:
            return server.tools
        key = SessionKey(org_id, server.id, root)
        found = self._listed.get(key)
        if found is not None and found[0] > time.monotonic() and key in self.pool:
            return found[1]
        try:
            tools = await self.pool.list_tools(key, server.endpoint)
        except AtorError as exc:
            self._listed.pop(key, None)
            failures.append((server, exc))
            return ()
        self._listed[key] = (time.monotonic() + self.listing_ttl, tools)
        self._listed.move_to_end(key)
        while len(self._listed) > 4096:
            self._listed.popitem(last=False)
        return tools

    def _tool(self, server: MountedServer, key: SessionKey, remote: RemoteTool,
              name: str) -> Tool:
        endpoint = server.endpoint
        origin = f"mcp:{endpoint.name}"
        description = f"[{origin}] {remote.description}"
        if len(description) > self.description_chars:
            marker = " [description cut]"
            description = description[: self.description_chars - len(marker)] + marker
        pool = self.pool

        async def handler(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            try:
                result = await pool.call(key, endpoint, remote.name, args,
                                         read_only=remote.read_only)
            except AtorError as exc:
                return failure(exc, tool=name)
            # Whole: the registry cuts or pages it to the turn's cap (tools/results.py).
            text, meta = render_result(result)
            return ToolResult(text, is_error=bool(result.is_error), untrusted=True, meta=meta)

        return Tool(name=name, description=description,
                    input_schema=remote.input_schema or {"type": "object"}, handler=handler,
                    timeout=endpoint.timeout * 2 + 5, read_only=remote.read_only,
                    origin=origin, untrusted=True)
