"""One turn as the loop sees it: an immutable context and one mutable state (layer: agent;
imports agent.caps, providers.base, tools.toolset).

`TurnContext` is frozen when the turn starts (ids, model, prompt inputs, caps, config hash)
and shared read-only by the loop, its hooks, toolsets and the engine. It names no feature:
an extension's own per-turn state rides in `extras`, read with `turn.get(Kind)`.
`TurnState` is the one place a turn's running figures live (messages, steps, usage, cost,
the budget reservation, the model call in flight); the loop writes it, everyone else reads
it. Nothing is counted in two places.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, TypeVar
from uuid import UUID

from ator.agent.caps import Caps
from ator.providers.base import Block, Message, Usage, UsageMeter
from ator.tools.toolset import ToolScope

__all__ = ["PartialCall", "TurnContext", "TurnState", "implementing"]

T = TypeVar("T")

# (type, protocol) -> whether the type implements it. An isinstance against a runtime
# protocol walks the protocol's members on every call (~10-50 us in 3.11); the per-turn
# seams ask it of every extra, several times a turn, always of the same few types.
_IMPLEMENTS: dict[tuple[type, type], bool] = {}


def implementing(values: Iterable[Any], protocol: type[Any]) -> list[Any]:
    """The values implementing `protocol` (a runtime-checkable one), checked once per type.
    (Typed loosely: mypy takes no protocol class for a `type[T]`.)"""
    found: list[Any] = []
    for value in values:
        key = (type(value), protocol)
        ok = _IMPLEMENTS.get(key)
        if ok is None:
            ok = _IMPLEMENTS[key] = isinstance(value, protocol)
        if ok:
            found.append(value)
    return found


@dataclass(frozen=True, slots=True)
class TurnContext:
    org_id: UUID
    thread_id: UUID
    turn_id: UUID
    setup_id: UUID
    root_id: UUID | None
    depth: int
    provider: str
    model: str
    persona: str
    instructions: str
    caps: Caps
    cache: bool = True
    config_hash: str = ""
    # The versioned prompt layers in force (agent/system_prompt.py builds the system prompt).
    persona_version: int = 0
    instructions_version: int = 0
    policy: str = ""
    policy_version: int = 0
    policy_replace: bool = False
    # Extensions' per-turn state, by its type (agent/extension.py `TurnField`, `CapGroup`).
    extras: Mapping[type[Any], Any] = field(default_factory=dict, hash=False, compare=False)

    def get(self, kind: type[T]) -> T | None:
        """An extension's per-turn state of type `kind`, or None when the turn has none."""
        found = self.extras.get(kind)
        return found if isinstance(found, kind) else None

    @property
    def user_id(self) -> str:
        """Stable per thread: providers use it for abuse tracking and cache affinity."""
        return f"ator-thread-{self.thread_id}"

    def tool_scope(self, step: int) -> ToolScope:
        return ToolScope(self.org_id, self.thread_id, self.turn_id, self.setup_id,
                         self.root_id, step)


@dataclass
class PartialCall:
    """The model call in flight: what it streamed so far and what it consumed so far (the
    provider's mid-stream usage, or an estimate from what streamed, flagged). If the turn is
    cut short (stop, timeout, stall), this is what gets persisted as the interrupted reply and
    billed."""

    step: int
    blocks: list[Block] = field(default_factory=list)
    meter: UsageMeter = field(default_factory=UsageMeter)
    # A compaction summary in flight is billed when cut short, but its text is no reply.
    purpose: str = "step"
    model: str | None = None  # when not the turn's (a compaction model)

    def usage(self) -> Usage:
        return self.meter.usage()


@dataclass
class TurnState:
    messages: list[Message]
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    cost: Decimal = Decimal(0)
    # USD reserved against the org's budget for the call about to be made (0 without one).
    reserved_usd: Decimal = Decimal(0)
    partial: PartialCall | None = None
    # What the next persisted model call records about its request (layers, tools, hash).
    request_meta: dict[str, Any] = field(default_factory=dict)
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    # The provider's opaque state for this thread (`ModelRequest.session`): loaded before
    # the turn's first call when the provider keeps sessions, replaced by each reply's own.
    session: Mapping[str, Any] | None = None
