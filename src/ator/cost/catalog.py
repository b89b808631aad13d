"""The maintained price catalog: genai-prices, read into ator's `Price` (layer: cost; imports
genai_prices and ator.cost.price only).

genai-prices (pydantic's price library) is a snapshot of providers' published prices with
curated match rules per model (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`;
`gpt-5-nano` is its own model, never `gpt-5`). Its bundled data is loaded when this module
is imported (about 0.2 s, once per process, never on a running event loop); ator never
calls its auto-updater, which would fetch over the network.

Lookups walk the library's match rules with one rule tightened: a `starts_with` rule
matches only at a name boundary and not where the rest reads as a version of its own, so
`claude-opus-4-6` matches `claude-opus-4-6-20260101` and `claude-opus-4-6@vertex` but not
`claude-opus-4-60`, and a rule for `claude-3` would not match `claude-3-5-haiku`. They
do not use the library's snapshot helpers, whose per-model-string caches grow without bound
on names a tenant can choose; the caller (`PriceTable`) keeps a bounded cache instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from genai_prices import data_snapshot
from genai_prices.types import (
    ClauseAnd,
    ClauseOr,
    ClauseStartsWith,
    MatchLogic,
    ModelInfo,
    ModelPrice,
    Provider,
    TieredPrices,
)

from ator.cost.price import Price, Tier

__all__ = ["CatalogModel", "catalog_models", "catalog_price"]

# Loaded at import: the data module is ~1.6 MB of Python literals.
_PROVIDERS: list[Provider] = data_snapshot.get_snapshot().providers

_FIELDS = (
    ("input", "input_mtok"),
    ("output", "output_mtok"),
    ("cache_read", "cache_read_mtok"),
    ("cache_write", "cache_write_mtok"),
)


_BOUNDARY = "-@:_/"
# A continuation that reads as a version of its own (`-6`, `.1`, `-60`, `-5-haiku`), not a
# snapshot date (`-20250929`, `-2025-09-29`, `-06-17`) or a platform's revision (`-002`,
# `@001`, `-v1:0`).
_VERSION = re.compile(r"[-.]\d{1,2}(?!\d)(?!-\d{2}(?!\d))")
# A rule's prefix that ends in a year (`claude-sonnet-4-2025`) is completed by the date.
_YEAR_END = re.compile(r"(?:^|[-@:_/.])\d{4}$")
# Compact dates as LiteLLM and OpenRouter write them (`-20251211`), tried as `-2025-12-11`
# when a name does not match as it is (the library's own fallback).
_COMPACT_DATE = re.compile(r"-(20\d{2})(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?=-|:|$)")


def _matches(rule: MatchLogic, ref: str) -> bool:
    if isinstance(rule, ClauseOr):
        return any(_matches(r, ref) for r in rule.or_)
    if isinstance(rule, ClauseAnd):
        return all(_matches(r, ref) for r in rule.and_)
    if isinstance(rule, ClauseStartsWith):
        prefix = rule.starts_with.lower()
        if not ref.startswith(prefix):
            return False
        rest = ref[len(prefix):]
        if not rest:
            return True
        if rest[0].isdigit() and _YEAR_END.search(prefix):
            return True
        tail = rest if rest[0] in _BOUNDARY else prefix[-1] + rest
        return tail[0] in _BOUNDARY and not _VERSION.match(tail)
    return rule.is_match(ref)


def _in(provider: Provider, ref: str) -> ModelInfo | None:
    return next((m for m in provider.models if _matches(m.match, ref)), None)


def _find(model: str) -> ModelInfo | None:
    found = _find_ref(model.lower())
    if found is None:
        dashed = _COMPACT_DATE.sub(r"-\1-\2-\3", model.lower())
        if dashed != model.lower():
            found = _find_ref(dashed)
    return found


def _find_ref(ref: str) -> ModelInfo | None:
    """The library's lookup (provider by its model rule, then its models, then its declared
    fallback providers, one step), with the tightened `starts_with`."""
    provider = next((p for p in _PROVIDERS
                     if p.model_match is not None and p.model_match.is_match(ref)), None)
    if provider is None:
        return None
    found = _in(provider, ref)
    for fallback_id in provider.fallback_model_providers or ():
        if found is not None:
            break
        fallback = next((p for p in _PROVIDERS if p.id == fallback_id), None)
        found = _in(fallback, ref) if fallback is not None else None
    return found


def _at(value: Decimal | TieredPrices, input_total: int) -> Decimal:
    if isinstance(value, TieredPrices):
        for tier in reversed(value.tiers):
            if input_total > tier.start:
                return tier.price
        return value.base
    return value


def _convert(prices: ModelPrice) -> Price | None:
    raw = {name: getattr(prices, key) for name, key in _FIELDS}
    if raw["input"] is None or raw["output"] is None:
        return None  # not priced per token (embeddings, images, audio): not ours to guess
    # A cache kind the provider does not price is billed as plain input (the library's rule).
    raw["cache_read"] = raw["cache_read"] if raw["cache_read"] is not None else raw["input"]
    raw["cache_write"] = raw["cache_write"] if raw["cache_write"] is not None else raw["input"]
    starts = sorted({t.start for v in raw.values() if isinstance(v, TieredPrices) for t in v.tiers})

    def rates(input_total: int) -> Price:
        at = {name: _at(value, input_total) for name, value in raw.items()}
        return Price(at["input"], at["output"], at["cache_read"], at["cache_write"])

    base = rates(0)
    tiers = tuple(Tier(start, rates(start + 1)) for start in starts)
    return Price(base.input, base.output, base.cache_read, base.cache_write, tiers)


def catalog_price(model: str, *, at: datetime | None = None) -> Price | None:
    """The library's price for `model` at time `at` (default now), or None when the library
    does not know the model or does not price it per token."""
    info = _find(model)
    if info is None:
        return None
    return _convert(info.get_prices(at or datetime.now(tz=UTC)))


@dataclass(frozen=True, slots=True)
class CatalogModel:
    """A model the catalog lists for a provider: what a setup form offers."""

    id: str
    name: str
    context_window: int | None
    price: Price


def catalog_models(provider: str, *, at: datetime | None = None) -> list[CatalogModel]:
    """The models the library lists under `provider` (its id: "anthropic", "openai") that
    are priced per token, in the library's order; [] for a provider it does not know."""
    found = next((p for p in _PROVIDERS if p.id == provider), None)
    if found is None:
        return []
    when = at or datetime.now(tz=UTC)
    out = []
    for m in found.models:
        price = _convert(m.get_prices(when))
        if price is not None:
            out.append(CatalogModel(m.id, m.name or m.id, m.context_window, price))
    return out
