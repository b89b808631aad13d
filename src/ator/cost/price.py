"""One model's price and the result of pricing a call (layer: cost; imports nothing of ator).

A `Price` is USD per million tokens for four kinds: input (not cached), output, cache read,
cache write. Tiered prices (e.g. Anthropic's long-context rates above 200k input tokens)
are `tiers`: past a tier's `above` count of input tokens (input + cache read + cache write,
as providers count it), *all* of the call's tokens bill at that tier's rates.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["Price", "Priced", "Tier", "usd_amount"]


@dataclass(frozen=True, slots=True)
class Tier:
    above: int  # applies when the call's input tokens exceed this many
    price: Price  # the rates from there on (its own tiers are ignored)


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal
    tiers: tuple[Tier, ...] = ()  # ascending by `above`

    @classmethod
    def of(cls, input: str, output: str, cache_read: str, cache_write: str) -> Price:
        return cls(Decimal(input), Decimal(output), Decimal(cache_read), Decimal(cache_write))

    def at(self, input_tokens: int) -> Price:
        """The rates that apply to a call with this many input tokens in total."""
        for tier in reversed(self.tiers):
            if input_tokens > tier.above:
                return tier.price
        return self


@dataclass(frozen=True, slots=True)
class Priced:
    """What a call cost and where the figure came from: `catalog` (usage x the model's
    price), `provider` (the provider reported the cost itself, preferred over the catalog)
    or `unpriced` (no price and no report: `usd` is 0 and must be flagged, not trusted)."""

    usd: Decimal
    priced: bool  # False: the model has no price; `usd` is 0 and must be flagged, not trusted
    source: str = "catalog"

    @classmethod
    def reported(cls, usd: Decimal) -> Priced:
        """The cost the provider reported for the call."""
        return cls(usd, True, "provider")


def usd_amount(value: Any) -> Decimal | None:
    """A USD amount read from outside (a CLI's report, an org's settings): a finite,
    non-negative number or numeric string, else None (never a guess)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        found = Decimal(str(value))
    except InvalidOperation:
        return None
    return found if found.is_finite() and found >= 0 else None
