"""The caps every turn runs under (layer: agent; imports errors, settings).

Defaults are what a careful operator would pick; a setup overrides any of them in
`config.caps`, up to the operator's ceiling for that cap (`Settings.cap_ceilings`). Every
cap ends a turn gracefully with a typed stop reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from ator.errors import ConfigError
from ator.settings import CapCeilings

__all__ = ["CapCeilings", "Caps"]

_DEFAULT_CEILINGS = CapCeilings()


def _invalid(message: str, code: str) -> ConfigError:
    # A ConfigError (what a setup's bad config is) answered as 422: the body was understood
    # and refused, and the problem says which cap and why.
    return ConfigError(message, code=code, status=422)


@dataclass(frozen=True, slots=True)
class Caps:
    max_steps: int = 25  # model calls per turn
    max_turn_tokens: int = 500_000  # input + output + cache read + cache write, per turn
    turn_timeout: float = 600.0  # wall-clock seconds per turn
    stall_timeout: float = 90.0  # seconds without any provider event
    tool_timeout: float = 120.0  # default per tool call
    tool_result_chars: int = 20_000  # longer results are cut with a marker
    tool_description_chars: int = 4_000
    max_output_tokens: int = 4_096  # per model call
    provider_retries: int = 3  # transient errors: 429, 5xx, overloaded, network
    # Tools still running after this many seconds: persist the model's reply before they end.
    persist_calls_after: float = 0.05
    # Subagent trees (subagents/), checked before every spawn: depth below the root, children
    # per parent, children not yet finished per tree, and what all descendants may spend.
    subagent_depth: int = 3
    subagent_width: int = 8
    subagent_live: int = 16
    tree_tokens: int = 2_000_000
    tree_usd: float = 20.0

    @classmethod
    def from_config(
        cls, raw: Any, ceilings: CapCeilings | None = None, *, clamp: bool = False
    ) -> Caps:
        """Build from a setup's `caps` dict, checked against the operator's ceilings
        (default: `CapCeilings()`). Raises ConfigError (status 422) for an unknown cap, a
        value that is not a finite number, below its minimum, or above its ceiling (code
        `cap_above_ceiling`, naming the cap and the ceiling).

        `clamp=True` lowers a value above its ceiling to the ceiling instead: for turn start,
        where a setup written under higher ceilings must keep working after the operator
        lowers them (writes are checked with the default, refusing)."""
        ceilings = ceilings or _DEFAULT_CEILINGS
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise _invalid("caps must be an object", "invalid_cap")
        known = {f.name: f for f in fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                raise _invalid(f"unknown cap {key!r}; known: {', '.join(sorted(known))}",
                               "invalid_cap")
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _invalid(f"cap {key!r} must be a number", "invalid_cap")
            if not math.isfinite(value):
                raise _invalid(f"cap {key!r} must be a finite number", "invalid_cap")
            if value < 0 or (key == "max_steps" and value < 1):
                raise _invalid(f"cap {key!r} is out of range", "invalid_cap")
            ceiling = getattr(ceilings, key)
            if value > ceiling and clamp:
                value = ceiling
            elif value > ceiling:
                raise _invalid(f"cap {key!r} is {value:g}, above the operator's ceiling of "
                               f"{ceiling:g}", "cap_above_ceiling")
            kind = int if known[key].type in ("int", int) else float
            changes[key] = kind(value)
        caps = replace(cls(), **changes)
        # A default above a lowered ceiling is lowered to it: the ceiling is the operator's.
        lowered = {f.name: getattr(ceilings, f.name) for f in fields(cls)
                   if f.name not in changes and getattr(caps, f.name) > getattr(ceilings, f.name)}
        return replace(caps, **lowered) if lowered else caps
