"""Estimated cost of model calls from token usage.

Prices are estimates in USD per million tokens, good enough for a budget
guard, never a bill: providers change prices and caching and batching shift
them. Override or extend them in the policy's ``[pricing."<model>"]`` tables.
A model matches its longest listed prefix, so ``gpt-4o-2024-08-06`` uses the
``gpt-4o`` price.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class Price(NamedTuple):
    input_usd_per_mtok: float
    output_usd_per_mtok: float


BUILTIN_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.5, 10.0),
    "gpt-4o-mini": Price(0.15, 0.6),
    "gpt-4.1": Price(2.0, 8.0),
    "gpt-4.1-mini": Price(0.4, 1.6),
    "gpt-4.1-nano": Price(0.1, 0.4),
    "gpt-5": Price(1.25, 10.0),
    "gpt-5-mini": Price(0.25, 2.0),
    "o3": Price(2.0, 8.0),
    "o4-mini": Price(1.1, 4.4),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "claude-haiku-4": Price(1.0, 5.0),
    "gemini-2.5-pro": Price(1.25, 10.0),
    "gemini-2.5-flash": Price(0.3, 2.5),
}


class PriceTable:
    """Model name to price, by longest prefix; unknown models cost nothing."""

    __slots__ = ("_prices", "_by_length", "_cache")

    def __init__(self, overrides: Mapping[str, Price] | None = None):
        self._prices = {**BUILTIN_PRICES, **(overrides or {})}
        self._by_length = sorted(self._prices, key=len, reverse=True)
        self._cache: dict[str, Price | None] = {}

    def price(self, model: str | None) -> Price | None:
        if not model:
            return None
        try:
            return self._cache[model]
        except KeyError:
            pass
        found = None
        lowered = model.lower()
        for prefix in self._by_length:
            if lowered.startswith(prefix.lower()):
                found = self._prices[prefix]
                break
        if len(self._cache) < 4096:  # bounded: model names come from spans
            self._cache[model] = found
        return found

    def cost(self, model: str | None, input_tokens: int, output_tokens: int) -> float:
        price = self.price(model)
        if price is None:
            return 0.0
        return (input_tokens * price.input_usd_per_mtok + output_tokens * price.output_usd_per_mtok) / 1e6
