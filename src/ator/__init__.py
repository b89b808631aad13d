"""ator: a self-hosted, multi-tenant runtime for LLM agents."""

from __future__ import annotations

__version__ = "0.1.0"

from ator.engine.runtime import Ator, TurnResult
from ator.settings import Settings
from ator.store.scope import Scope

__all__ = ["Ator", "Scope", "Settings", "TurnResult", "__version__"]
