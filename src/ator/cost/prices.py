"""The price table: which price a model has, and the arithmetic that turns usage into USD
(layer: cost; imports ator.cost.*, ator.settings and ator.usage).

Where a price comes from, first match wins, and every match is on the exact model id:
1. operator overrides (`ATOR_PRICES` / `ATOR_PRICES_FILE`, or a mapping given in code);
2. ator's in-process models, which cost nothing and say so (`DEFAULT_PRICES`);
3. the maintained catalog (genai-prices), whose curated rules also know each model's dated
   and aliased ids.
A model none of them knows is *unpriced*: its calls record 0 USD with `priced=False`, never
another model's price. (The table this replaced matched the longest known prefix, which
priced `claude-opus-4-6` as `claude-opus-4` and `gpt-5-nano` as `gpt-5`.)

Lookups are cached per model id in a bounded LRU: model ids are tenant-chosen strings.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from datetime import UTC, date, datetime
from decimal import Decimal

from ator.cost.catalog import catalog_price
from ator.cost.price import Price, Priced
from ator.settings import PriceSetting, Settings
from ator.usage import Usage

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "Priced"]

_M = Decimal(1_000_000)
_MICRO = Decimal("0.000001")  # model_calls.cost_usd is NUMERIC(14, 6)
_CACHE_SIZE = 4096

# Models that run in-process cost nothing, explicitly (they are in no price catalog).
DEFAULT_PRICES: Mapping[str, Price] = {
    "scripted": Price.of("0", "0", "0", "0"),
    "smollm2-135m-instruct": Price.of("0", "0", "0", "0"),
}


def _from_setting(s: PriceSetting) -> Price:
    return Price(s.input, s.output,
                 s.input if s.cache_read is None else s.cache_read,
                 s.input if s.cache_write is None else s.cache_write)


class PriceTable:
    """Prices by exact model id: overrides, then in-process models, then the catalog."""

    def __init__(
        self, overrides: Mapping[str, Price] | None = None, *, catalog: bool = True
    ) -> None:
        self._exact = {**DEFAULT_PRICES, **(overrides or {})}
        self._catalog = catalog
        self._cache: OrderedDict[str, tuple[date, Price | None]] = OrderedDict()

    @classmethod
    def from_settings(cls, settings: Settings) -> PriceTable:
        """The process's table: the catalog plus the operator's overrides."""
        return cls({model: _from_setting(s) for model, s in settings.prices.items()})

    def with_overrides(self, overrides: Mapping[str, Price]) -> PriceTable:
        return PriceTable({**self._exact, **overrides}, catalog=self._catalog)

    def lookup(self, model: str) -> Price | None:
        """The model's price, or None when it is unpriced. Never blocks: the catalog is
        loaded at import and a lookup is a scan of in-memory match rules (~10 µs)."""
        exact = self._exact.get(model)
        if exact is not None or not self._catalog:
            return exact
        today = datetime.now(tz=UTC).date()  # catalog prices can change on a start date
        hit = self._cache.get(model)
        if hit is not None and hit[0] == today:
            self._cache.move_to_end(model)
            return hit[1]
        price = catalog_price(model)
        self._cache[model] = (today, price)
        self._cache.move_to_end(model)
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return price

    def cost(self, model: str, usage: Usage) -> Priced:
        price = self.lookup(model)
        if price is None:
            return Priced(Decimal(0), False, "unpriced")
        rates = price.at(usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens)
        usd = (
            usage.input_tokens * rates.input
            + usage.output_tokens * rates.output
            + usage.cache_read_tokens * rates.cache_read
            + usage.cache_write_tokens * rates.cache_write
        ) / _M
        return Priced(usd.quantize(_MICRO), True)
