"""The subagent extension's caps and per-turn state (layer: subagents; imports agent.caps,
store.tree).

`SubagentCaps` are set like every cap in a setup's `config.caps` (refused when unknown or
above the operator's ceiling, `Settings.cap_ceilings`) and lowered by the org's own
(`Ator.set_org_caps`); they are checked before every spawn. `SubagentTurn` is what a turn
knows of its place in a tree, read in the turn's start statement (`store.tree.TURN_SQL`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ator.agent.caps import CapGroup

__all__ = ["TREE_CAPS", "SubagentCaps", "SubagentTurn", "bound", "subagent_caps", "tool_bounds"]


@dataclass(frozen=True, slots=True)
class SubagentCaps:
    """Subagent trees, checked before every spawn: depth below the root, children per
    parent, children not yet finished per tree, and what all descendants may spend."""

    subagent_depth: int = 3
    subagent_width: int = 8
    subagent_live: int = 16
    tree_tokens: int = 2_000_000
    tree_usd: float = 20.0


TREE_CAPS = ("subagent_depth", "subagent_width", "subagent_live", "tree_tokens", "tree_usd")


def subagent_caps(ceilings: Any) -> CapGroup:
    """The group, ceiled by the operator's `cap_ceilings` (which has a field per cap)."""
    return CapGroup(SubagentCaps, ceilings)


def bound(policy: dict[str, Any]) -> dict[str, Any]:
    """A setup's tool policy as a bound on the tools of the threads below it."""
    allow = policy.get("allow")
    return {"allow": list(allow) if allow is not None else None,
            "deny": list(policy.get("deny") or [])}


def tool_bounds(contract: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The tool policies a subagent's tools must satisfy besides its own setup's: its
    contract's `tools` (as an allow list) and the policies of every thread above it."""
    contract = contract or {}
    bounds = [bound(b) for b in contract.get("bounds") or [] if isinstance(b, dict)]
    if contract.get("tools") is not None:
        bounds.append({"allow": list(contract["tools"]), "deny": []})
    return bounds


@dataclass(frozen=True, slots=True)
class SubagentTurn:
    """A turn's place in its tree: its parent (None for a root), its delegation contract
    and how many of its subagents had not finished when the turn started."""

    parent_id: UUID | None
    contract: dict[str, Any] | None
    children: int

    @classmethod
    def build(cls, value: Any) -> SubagentTurn:
        value = value or {}
        parent = value.get("parent_id")
        return cls(UUID(str(parent)) if parent else None, value.get("contract"),
                   int(value.get("children") or 0))

    def tool_bounds(self) -> list[dict[str, Any]]:
        return tool_bounds(self.contract)
