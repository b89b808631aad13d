"""Model prices and the arithmetic that turns usage into USD (layer: cost; imports
ator.providers.base for Usage only).

Prices are USD per million tokens for four kinds: input, output, cache read, cache write
(Anthropic's 5-minute cache writes bill at 1.25x input; OpenAI's automatic cache has no write
charge). A model not in the table is *unpriced*: its calls record 0 USD with `priced=False`,
never another model's price. Operators override or extend the table per process or per setup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from ator.providers.base import Usage

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "Priced"]

_M = Decimal(1_000_000)
_CENT_MICROS = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    @classmethod
    def of(cls, input: str, output: str, cache_read: str, cache_write: str) -> Price:
        return cls(Decimal(input), Decimal(output), Decimal(cache_read), Decimal(cache_write))


@dataclass(frozen=True, slots=True)
class Priced:
    usd: Decimal
    priced: bool


# Public list prices (USD / MTok). Keys match the model id or its prefix before a date suffix.
DEFAULT_PRICES: Mapping[str, Price] = {
    "claude-opus-4": Price.of("15", "75", "1.50", "18.75"),
    "claude-opus-4-1": Price.of("15", "75", "1.50", "18.75"),
    "claude-opus-4-5": Price.of("5", "25", "0.50", "6.25"),
    "claude-sonnet-4": Price.of("3", "15", "0.30", "3.75"),
    "claude-sonnet-4-5": Price.of("3", "15", "0.30", "3.75"),
    "claude-haiku-4-5": Price.of("1", "5", "0.10", "1.25"),
    "claude-3-5-haiku": Price.of("0.80", "4", "0.08", "1"),
    "gpt-4o": Price.of("2.50", "10", "1.25", "0"),
    "gpt-4o-mini": Price.of("0.15", "0.60", "0.075", "0"),
    "gpt-4.1": Price.of("2", "8", "0.50", "0"),
    "gpt-4.1-mini": Price.of("0.40", "1.60", "0.10", "0"),
    "gpt-5": Price.of("1.25", "10", "0.125", "0"),
    "gpt-5-mini": Price.of("0.25", "2", "0.025", "0"),
    # In-process and test models cost nothing, and say so explicitly.
    "scripted": Price.of("0", "0", "0", "0"),
    "smollm2-135m-instruct": Price.of("0", "0", "0", "0"),
}


class PriceTable:
    """Looks a model up exactly, then by its longest known prefix (so `claude-sonnet-4-5-
    20250929` finds `claude-sonnet-4-5`), and never falls back to an unrelated model."""

    def __init__(self, prices: Mapping[str, Price] | None = None) -> None:
        self._prices = dict(DEFAULT_PRICES if prices is None else prices)
        self._by_length = sorted(self._prices, key=len, reverse=True)

    def with_overrides(self, overrides: Mapping[str, Price]) -> PriceTable:
        return PriceTable({**self._prices, **overrides})

    def lookup(self, model: str) -> Price | None:
        if model in self._prices:
            return self._prices[model]
        for known in self._by_length:
            if model.startswith(known + "-") or model.startswith(known + "@"):
                return self._prices[known]
        return None

    def cost(self, model: str, usage: Usage) -> Priced:
        price = self.lookup(model)
        if price is None:
            return Priced(Decimal(0), False)
        usd = (
            usage.input_tokens * price.input
            + usage.output_tokens * price.output
            + usage.cache_read_tokens * price.cache_read
            + usage.cache_write_tokens * price.cache_write
        ) / _M
        return Priced(usd.quantize(_CENT_MICROS), True)
