"""The caps every turn runs under (layer: agent; imports errors, settings).

Defaults are what a careful operator would pick; a setup overrides any of them in
`config.caps`, up to the operator's ceiling for that cap (`Settings.cap_ceilings`). Every
cap ends a turn gracefully with a typed stop reason. `Caps` holds the loop's own; an
extension adds a `CapGroup` of its own (subagents: `subagents.caps.SubagentCaps`), known,
validated and ceiled the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from ator.errors import ConfigError
from ator.settings import CapCeilings

__all__ = ["CapCeilings", "CapGroup", "Caps", "parse_caps"]

_DEFAULT_CEILINGS = CapCeilings()


def _invalid(message: str, code: str) -> ConfigError:
    # A ConfigError (what a setup's bad config is) answered as 422: the body was understood
    # and refused, and the problem says which cap and why.
    return ConfigError(message, code=code, status=422)


@dataclass(frozen=True, slots=True)
class Caps:
    """The loop's own caps. An extension's caps are a `CapGroup` of its own."""

    max_steps: int = 25  # model calls per turn
    max_turn_tokens: int = 500_000  # input + output + cache read + cache write, per turn
    turn_timeout: float = 600.0  # wall-clock seconds per turn
    stall_timeout: float = 90.0  # seconds without any provider event
    tool_timeout: float = 120.0  # default per tool call
    tool_result_chars: int = 20_000  # longer results are cut with a marker
    tool_description_chars: int = 4_000
    max_output_tokens: int = 4_096  # per model call
    provider_retries: int = 3  # transient errors: 429, 5xx, overloaded, network
    # Tools, or the next model call, still running after this many seconds: persist what
    # is held (the model's reply; the step before the call) while they run.
    persist_calls_after: float = 0.05

    @classmethod
    def from_config(
        cls, raw: Any, ceilings: CapCeilings | None = None, *, clamp: bool = False,
        groups: Sequence[CapGroup] = (),
    ) -> Caps:
        """Build from a setup's `caps` dict, checked against the operator's ceilings
        (default: `CapCeilings()`). Raises ConfigError (status 422) for an unknown cap, a
        value that is not a finite number, below its minimum, or above its ceiling (code
        `cap_above_ceiling`, naming the cap and the ceiling). `groups` are the extensions'
        caps: known too, checked the same way (`parse_caps` returns their values).

        `clamp=True` lowers a value above its ceiling to the ceiling instead: for turn start,
        where a setup written under higher ceilings must keep working after the operator
        lowers them (writes are checked with the default, refusing)."""
        return parse_caps(raw, ceilings, groups, clamp=clamp)[0]


@dataclass(frozen=True, slots=True)
class CapGroup:
    """Caps an extension adds to `config.caps`: `kind` is a frozen dataclass of numeric
    caps with their defaults; `ceilings` has an attribute per cap, the operator's ceiling
    (the settings' `cap_ceilings`, or an instance of `kind` the operator built the
    extension with)."""

    kind: type[Any]
    ceilings: Any

    def parse(self, raw: Mapping[str, Any] | None, *, clamp: bool = False) -> Any:
        """This group's caps from a setup's `caps` dict, ignoring the others' keys."""
        names = {f.name for f in fields(self.kind)}
        return _build(self.kind, {k: v for k, v in (raw or {}).items() if k in names},
                      self.ceilings, clamp)


def parse_caps(
    raw: Any, ceilings: CapCeilings | None, groups: Sequence[CapGroup] = (), *,
    clamp: bool = False,
) -> tuple[Caps, dict[type[Any], Any]]:
    """A setup's `caps` dict as the loop's `Caps` and each group's caps, by kind. Raises
    ConfigError (422) for a cap no group knows, or a bad value (see `Caps.from_config`)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _invalid("caps must be an object", "invalid_cap")
    every = [CapGroup(Caps, ceilings or _DEFAULT_CEILINGS), *groups]
    owner = {f.name: g for g in every for f in fields(g.kind)}
    for key in raw:
        if key not in owner:
            raise _invalid(f"unknown cap {key!r}; known: {', '.join(sorted(owner))}",
                           "invalid_cap")
    parsed = {g.kind: g.parse(raw, clamp=clamp) for g in every}
    core = parsed.pop(Caps)
    assert isinstance(core, Caps)
    return core, parsed


def _build(kind: type[Any], raw: Mapping[str, Any], ceilings: Any, clamp: bool) -> Any:
    known = {f.name: f for f in fields(kind)}
    changes: dict[str, Any] = {}
    for key, value in raw.items():
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
        as_type = int if known[key].type in ("int", int) else float
        changes[key] = as_type(value)
    caps = replace(kind(), **changes)
    # A default above a lowered ceiling is lowered to it: the ceiling is the operator's.
    lowered = {f.name: getattr(ceilings, f.name) for f in fields(kind)
               if f.name not in changes and getattr(caps, f.name) > getattr(ceilings, f.name)}
    return replace(caps, **lowered) if lowered else caps
