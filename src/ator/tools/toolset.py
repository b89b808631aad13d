"""Toolsets: where a turn's tools come from, asked again before every model call (layer:
tools; imports tools.base, tools.policy, tools.registry).

A `Toolset` yields the tools for a turn (native tools, an org's MCP servers, subagent tools,
workflows…). `TurnTools` asks every toolset before each model call, applies the setup's tool
policy and keeps the registry the step runs with, so a toolset may change what it offers
between steps (`tool_search` activating more tools, an MCP server coming back) and the next
model call sees it. A toolset that fails ends the turn with its error: a missing tool is
worse than a clear stop.

Outside a turn (the MCP gateway, a workflow step) there is no thread: an `OrgToolScope` names
the org, who asks (`Caller`) and the tool policy in force. A toolset that can serve such a
call says so by being an `OrgToolset` too (`org_tools(scope)`); the same `permitted` rule
applies the policy in both places.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Protocol, runtime_checkable
from uuid import UUID

from ator.providers.base import ToolSpec
from ator.tools.base import Caller, Tool
from ator.tools.policy import ToolPolicy
from ator.tools.registry import ToolRegistry

__all__ = [
    "LeftOut",
    "OrgToolScope",
    "OrgToolset",
    "StaticToolset",
    "ToolScope",
    "Toolset",
    "TurnTools",
    "permitted",
]


def _matches(name: str, patterns: frozenset[str]) -> bool:
    """A policy entry is a tool name or a glob over names (`docs__*`: a whole MCP server)."""
    return name in patterns or any(fnmatchcase(name, p) for p in patterns
                                   if "*" in p or "?" in p or "[" in p)


def permitted(name: str, allow: frozenset[str] | None, deny: frozenset[str]) -> bool:
    """A setup's tool policy on one tool name: `allow` None is every tool; `deny` wins."""
    return (allow is None or _matches(name, allow)) and not _matches(name, deny)


@dataclass(frozen=True, slots=True)
class OrgToolScope:
    """Where a tool call outside a turn runs: an org, who asked, and the tool policy in force
    (a workflow's setup's, the gateway's for that key; the default allows every always-on
    tool and no opt-in one)."""

    org_id: UUID
    caller: Caller
    policy: ToolPolicy = field(default_factory=ToolPolicy)
    # The caller's conversation, when it has one (the gateway's downstream session): a
    # toolset holding upstream sessions keys them by it, so two conversations never share one.
    conversation: UUID | None = None
    # Filled by the toolsets: what they could not offer this time, and why.
    left_out: list[LeftOut] = field(default_factory=list, compare=False)


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A source of tools a toolset left out of an `OrgToolScope`'s tools (e.g. an MCP server
    that could not be reached), with a stable `code`; the other sources are still offered."""

    source: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ToolScope:
    """Where a turn runs, as a toolset sees it. `step` is the model call about to be made
    (1 for the turn's first)."""

    org_id: UUID
    thread_id: UUID
    turn_id: UUID
    setup_id: UUID
    root_id: UUID | None
    step: int


@runtime_checkable
class Toolset(Protocol):
    name: str

    async def tools(self, scope: ToolScope) -> Sequence[Tool]:
        """The tools offered for the next model call of this turn."""
        ...


@runtime_checkable
class OrgToolset(Protocol):
    """A toolset that also serves calls outside a turn."""

    name: str

    async def org_tools(self, scope: OrgToolScope) -> Sequence[Tool]:
        """The tools it offers to `scope` (before the policy's allow/deny)."""
        ...


class StaticToolset:
    """The same tools for every turn (the process's native tools). Checked when built: a
    bad schema or two tools sharing a name with different schemas is a ConfigError here,
    not in the first turn."""

    def __init__(self, tools: Iterable[Tool], name: str = "native") -> None:
        self.name = name
        self._tools = tuple(tools)
        ToolRegistry(self._tools)

    async def tools(self, scope: ToolScope) -> Sequence[Tool]:
        return self._tools

    async def org_tools(self, scope: OrgToolScope) -> Sequence[Tool]:
        return self._tools


class TurnTools:
    """The tools of one turn, refreshed from its toolsets before every model call."""

    def __init__(
        self,
        toolsets: Sequence[Toolset],
        *,
        allow: Sequence[str] | None,
        deny: Sequence[str],
        description_limit: int,
        within: Sequence[Sequence[str]] = (),
    ) -> None:
        """`within`: further allow lists a tool must match too (the bounds a subagent's
        ancestors set): each narrows, none widens."""
        self._toolsets = tuple(toolsets)
        self._allow = None if allow is None else frozenset(allow)
        self._within = tuple(frozenset(w) for w in within)
        self._deny = frozenset(deny)
        self._description_limit = description_limit
        self._offered: tuple[int, ...] = ()
        self.registry = ToolRegistry()
        self.specs: list[ToolSpec] = []

    async def refresh(self, scope: ToolScope) -> ToolRegistry:
        """Ask every toolset; rebuild the registry only when what they offer changed.
        Raises ConfigError when two tools share a name with different schemas."""
        offered = [tool for ts in self._toolsets for tool in await ts.tools(scope)]
        identity = tuple(id(t) for t in offered)
        if identity != self._offered:
            registry = ToolRegistry()
            for tool in offered:
                if permitted(tool.name, self._allow, self._deny) \
                        and all(_matches(tool.name, w) for w in self._within):
                    registry.add(tool)
            self.registry = registry
            self.specs = registry.specs(description_limit=self._description_limit)
            self._offered = identity
        return self.registry
