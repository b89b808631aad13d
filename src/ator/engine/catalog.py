"""What a setup can name: each provider ator runs and the models it knows, with the prices
ator bills and the context window it plans for (layer: engine; imports cost, agent.windows,
providers.local, settings).

Read-only, the same for every org. A hosted provider's models are the catalog's that ator
would bill (the process's price table prices them: the operator's overrides, then the
catalog) and that have a known context window, the default model first, then newest names
first. Each carries the catalog's `context_window` and `planned_window`, the window a turn
plans compaction for (`agent.windows.context_window`: the operator's table, then ator's),
which a setup's `config.context_window` overrides; the two can differ.
`server_key` says whether the operator configured a process-wide key for the provider: a
setup that leaves `base_url` out uses the server's endpoint with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ator.agent.windows import context_window
from ator.cost.catalog import catalog_models
from ator.cost.price import Price
from ator.cost.prices import PriceTable
from ator.providers.local import DEFAULT_LOCAL_MODEL
from ator.providers.registry import DEFAULT_ANTHROPIC_MODEL, DEFAULT_OPENAI_MODEL
from ator.settings import Settings

__all__ = ["OfferedModel", "OfferedProvider", "offered_providers"]


@dataclass(frozen=True, slots=True)
class OfferedModel:
    id: str
    name: str
    context_window: int | None  # the catalog's figure (None: not in the catalog)
    planned_window: int  # what a turn plans for
    price: Price | None  # None: unpriced (its calls record 0 USD, flagged)


@dataclass(frozen=True, slots=True)
class OfferedProvider:
    id: str
    label: str
    server_key: bool
    models: tuple[OfferedModel, ...]


_DEFAULTS = {"anthropic": DEFAULT_ANTHROPIC_MODEL, "openai": DEFAULT_OPENAI_MODEL}


def _model(model_id: str, name: str, window: int | None, provider: str, settings: Settings,
           prices: PriceTable) -> OfferedModel:
    planned = context_window(model_id, provider, operator=settings.model_windows)
    return OfferedModel(model_id, name, window, planned, prices.lookup(model_id))


def _hosted(provider: str, settings: Settings, prices: PriceTable) -> tuple[OfferedModel, ...]:
    listed = [_model(m.id, m.name, m.context_window, provider, settings, prices)
              for m in reversed(catalog_models(provider)) if m.context_window is not None]
    offered = [m for m in listed if m.price is not None]
    offered.sort(key=lambda m: m.id != _DEFAULTS.get(provider))  # stable: the rest keep order
    return tuple(offered)


def offered_providers(settings: Settings, prices: PriceTable) -> list[OfferedProvider]:
    """The providers a setup may name, in the order a form offers them."""
    hosted = [("anthropic", "Anthropic", settings.anthropic_api_key is not None),
              ("openai", "OpenAI or compatible", settings.openai_api_key is not None)]
    out = [OfferedProvider(pid, label, key, _hosted(pid, settings, prices))
           for pid, label, key in hosted]
    out.append(OfferedProvider("local", "Local (in-process llama.cpp)", True, (
        _model(DEFAULT_LOCAL_MODEL, DEFAULT_LOCAL_MODEL, None, "local", settings, prices),)))
    out.append(OfferedProvider("scripted", "Scripted (tests and demos)", True, (
        _model("scripted", "scripted", None, "scripted", settings, prices),)))
    return out
