"""Token usage: counts per (model, source), summed into the shape every API shows.

A run's usage, a thread's and a user's all read the same way:

    {"input_tokens", "output_tokens", "total_tokens", "cache_read_tokens",
     "llm_calls", "cost", "by_model": {name: {...same counts...}},
     "by_source": {"lead_agent": {...}, "subagents": {...}, "middleware": {...}}}

`input_tokens` includes the cache reads (`cache_read_tokens` is the part of it
the provider served from its prompt cache). `cost` is null unless a price table
entry covered some of the tokens; it sums the priced part only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

SOURCES = ("lead_agent", "subagents", "middleware")
# The runner's work after a run's end (memory extraction, the thread's title): in
# `by_source` only when some tokens were spent on it.
AFTER_RUN_SOURCES = ("memory", "title")
KNOWN_SOURCES = SOURCES + AFTER_RUN_SOURCES
COUNTS = ("input_tokens", "output_tokens", "total_tokens", "cache_read_tokens", "llm_calls")
COST_DIGITS = 10


class Price(BaseModel):
    """One entry of the YAML `prices` table, in currency units per million tokens."""

    input_per_million: float = Field(default=0.0, ge=0)  # a million input tokens' price
    output_per_million: float = Field(default=0.0, ge=0)  # a million output tokens' price
    # Cache reads are billed at this rate instead of input's (default: input's).
    cache_read_per_million: float | None = Field(default=None, ge=0)


@dataclass
class TokenCount:
    model: str
    source: str
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0
    llm_calls: int = 0
    cost: float | None = None

    def priced(self, prices: Mapping[str, Price]) -> TokenCount:
        """This count with its cost by `prices` (unchanged when its model has none)."""
        price = prices.get(self.model)
        if price is None:
            return self
        cache_rate = price.cache_read_per_million
        if cache_rate is None:
            cache_rate = price.input_per_million
        uncached = max(self.input_tokens - self.cache_read_tokens, 0)
        cost = (
            uncached * price.input_per_million
            + self.cache_read_tokens * cache_rate
            + self.output_tokens * price.output_per_million
        ) / 1_000_000
        self.cost = round(cost, COST_DIGITS)
        return self


def empty_block() -> dict[str, Any]:
    return {**dict.fromkeys(COUNTS, 0), "cost": None}


def _add(block: dict[str, Any], count: TokenCount) -> None:
    for name in COUNTS:
        block[name] += getattr(count, name)
    if count.cost is not None:
        block["cost"] = round((block["cost"] or 0.0) + count.cost, COST_DIGITS)


def summarize(counts: Iterable[TokenCount]) -> dict[str, Any]:
    """Totals, by model and by source (every source present, zero when unused)."""
    total = empty_block()
    by_model: dict[str, dict[str, Any]] = {}
    by_source = {source: empty_block() for source in SOURCES}
    for count in counts:
        _add(total, count)
        _add(by_model.setdefault(count.model, empty_block()), count)
        _add(by_source.setdefault(count.source, empty_block()), count)
    return {**total, "by_model": by_model, "by_source": by_source}
