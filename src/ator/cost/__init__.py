"""Money: prices, the catalog they come from, and worst-case estimates (layer: cost)."""

from ator.cost.estimate import worst_case_usd
from ator.cost.price import Price, Priced, Tier
from ator.cost.prices import DEFAULT_PRICES, PriceTable

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "Priced", "Tier", "worst_case_usd"]
