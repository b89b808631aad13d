"""How much a model reads at once: context windows by model id (layer: agent; imports
nothing of ator).

A built-in table matched by prefix (the longest matching prefix wins), overridable by the
operator (`ATOR_MODEL_WINDOWS`, same prefix rule, checked first) and by a setup
(`config.context_window`, checked before both). Unknown hosted models get a conservative
default; the packaged local model has its own small window.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["DEFAULT_WINDOW", "LOCAL_WINDOW", "MODEL_WINDOWS", "context_window"]

DEFAULT_WINDOW = 128_000
LOCAL_WINDOW = 2_048  # providers/local.py DEFAULT_N_CTX

# Tokens of context per model family, by id prefix.
MODEL_WINDOWS: Mapping[str, int] = {
    "claude-": 200_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "gpt-4o": 128_000,
    "gpt-4": 128_000,
    "gpt-": 128_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4": 200_000,
}


def _by_prefix(model: str, table: Mapping[str, int]) -> int | None:
    best = max((p for p in table if model.startswith(p)), key=len, default=None)
    return None if best is None else table[best]


def context_window(
    model: str, provider: str, *, operator: Mapping[str, int] | None = None,
    setup: int | None = None,
) -> int:
    """The context window (tokens) a turn plans for: the setup's own figure, else the
    operator's table, else the built-in one, else a default by provider."""
    if setup is not None:
        return setup
    for table in (operator or {}, MODEL_WINDOWS):
        found = _by_prefix(model, table)
        if found is not None:
            return found
    return LOCAL_WINDOW if provider == "local" else DEFAULT_WINDOW
