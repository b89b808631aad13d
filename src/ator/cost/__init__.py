"""Money: prices and budgets (layer: cost)."""

from ator.cost.prices import DEFAULT_PRICES, Price, Priced, PriceTable

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "Priced"]
