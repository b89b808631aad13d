"""What a turn's requests must fit in, from the operator's settings and the setup (layer:
engine; imports agent, settings, store).

The model window comes from `agent.windows.context_window` (the setup's `context_window`,
the operator's `ATOR_MODEL_WINDOWS`, the built-in table). The transport body limit is the
operator's per process endpoint (`ATOR_ANTHROPIC_BODY_LIMIT`, `ATOR_OPENAI_BODY_LIMIT`); a
setup may lower it with `config.body_limit`, and a setup with its own `base_url` (a proxy)
states its own, defaulting to the provider's. Providers with no HTTP transport (scripted,
local) have only a window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ator.agent.compaction import ContextLimits
from ator.agent.windows import context_window
from ator.settings import Settings

__all__ = ["ContextPolicy"]


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    model_windows: Mapping[str, int] = field(default_factory=dict)
    body_limits: Mapping[str, int] = field(default_factory=dict)  # provider -> bytes
    threshold: float = 0.8

    @classmethod
    def from_settings(cls, settings: Settings) -> ContextPolicy:
        return cls(model_windows=dict(settings.model_windows),
                   body_limits={"anthropic": settings.anthropic_body_limit,
                                "openai": settings.openai_body_limit},
                   threshold=settings.compaction_threshold)

    def limits(self, provider: str, model: str, config: Mapping[str, Any]) -> ContextLimits:
        """The limits of one turn of a setup (`config` already validated when written)."""
        own = _int(config.get("body_limit"))
        process = self.body_limits.get(provider)
        if config.get("base_url"):
            body = own if own is not None else process  # the tenant's proxy
        elif process is not None and own is not None:
            body = min(process, own)  # a setup may lower the operator's limit, not raise it
        else:
            body = process if process is not None else own
        window = context_window(model, provider, operator=self.model_windows,
                                setup=_int(config.get("context_window")))
        return ContextLimits(window_tokens=window, body_limit=body, threshold=self.threshold,
                             model=str(config.get("compaction_model") or ""))


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
