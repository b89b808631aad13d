"""ator: a self-hosted, multi-tenant runtime for LLM agents.

The package root is lazy (as starlette's holds only its version): importing `ator` or any
small module below it (`ator.errors`, `ator.settings`) does not load the engine, the
database driver or the provider SDKs. `from ator import Ator` loads them on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Ator", "Scope", "Settings", "TurnResult", "__version__"]

_LAZY = {
    "Ator": "ator.engine.runtime",
    "TurnResult": "ator.engine.runtime",
    "Settings": "ator.settings",
    "Scope": "ator.store.scope",
}

if TYPE_CHECKING:
    from ator.engine.runtime import Ator, TurnResult
    from ator.settings import Settings
    from ator.store.scope import Scope


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ator' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
