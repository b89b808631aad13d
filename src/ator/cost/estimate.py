"""A model call's worst-case cost, reserved against the org's budget before the call
(layer: cost; imports ator.cost.*).

Pure arithmetic, no I/O: the engine reserves this amount in the ledger (store/ledger.py)
before each call and settles it to the real cost after.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal

from ator.cost.prices import PriceTable

__all__ = ["over_cap", "worst_case_usd"]

_M = Decimal(1_000_000)
_MICRO = Decimal("0.000001")


def worst_case_usd(
    prices: PriceTable, model: str, input_tokens_estimate: int, max_output_tokens: int
) -> Decimal | None:
    """The most a call can cost: every input token at the dearest input kind the model has
    (a cache write costs more than plain input) and `max_output_tokens` of output, at the
    tier the estimated input falls in; rounded up to the micro-dollar. None when the model
    is unpriced (the caller decides: a budgeted org fails closed). The only error left is
    the input estimate's own."""
    if input_tokens_estimate < 0 or max_output_tokens < 0:
        raise ValueError("token counts cannot be negative")
    price = prices.lookup(model)
    if price is None:
        return None
    rates = price.at(input_tokens_estimate)
    per_input = max(rates.input, rates.cache_read, rates.cache_write)
    usd = (input_tokens_estimate * per_input + max_output_tokens * rates.output) / _M
    return usd.quantize(_MICRO, rounding=ROUND_CEILING)


def over_cap(who: str, label: str, spent: Decimal, worst: Decimal, cap: Decimal) -> str | None:
    """The rule of every spend cap checked before a model call (a subagent tree's, a
    workflow run's): the call runs only if settled spend plus its worst case fits under the
    cap, so the cap is overshot by at most what that estimate missed. Why not, in words a
    user and the model can read; None when it fits."""
    if spent >= cap:
        return f"{who} spent: {label} is ${spent} of ${cap}"
    if spent + worst > cap:
        return (f"{who}: the next call may cost up to ${worst}, more than the "
                f"${cap - spent} {label} leaves (${spent} spent of ${cap})")
    return None
