"""The caps every turn runs under (layer: agent; imports errors).

Defaults are what a careful operator would pick; a setup overrides any of them in
`config.caps`. Every cap ends a turn gracefully with a typed stop reason.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ator.errors import ConfigError

__all__ = ["Caps"]


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

    @classmethod
    def from_config(cls, raw: Any) -> Caps:
        """Build from a setup's `caps` dict; unknown keys and bad values are errors."""
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise ConfigError("caps must be an object")
        known = {f.name: f for f in fields(cls)}
        changes: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in known:
                raise ConfigError(f"unknown cap {key!r}; known: {', '.join(sorted(known))}")
            kind = int if known[key].type in ("int", int) else float
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"cap {key!r} must be a number")
            if value < 0 or (key == "max_steps" and value < 1):
                raise ConfigError(f"cap {key!r} is out of range")
            changes[key] = kind(value)
        return replace(cls(), **changes)
