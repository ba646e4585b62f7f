"""A run's token usage: each LLM call counted once (by its callback run id),
per configured model and per source (lead agent, subagents, middleware)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import chain
from typing import Any
from uuid import UUID

from langchain_core.outputs import LLMResult

from waybill.common.usage import Price, TokenCount
from waybill.v1 import admission_pb2


@dataclass(frozen=True)
class CallUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cache_read_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cache_read_tokens": self.cache_read_tokens,
        }


def _number(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _from_usage_metadata(usage: Mapping[str, Any]) -> CallUsage:
    input_tokens = _number(usage.get("input_tokens"))
    output_tokens = _number(usage.get("output_tokens"))
    details = usage.get("input_token_details") or {}
    return CallUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=_number(usage.get("total_tokens")) or input_tokens + output_tokens,
        cache_read_tokens=_number(details.get("cache_read")),
    )


def _from_token_usage(usage: Mapping[str, Any]) -> CallUsage:
    """`llm_output.token_usage` in OpenAI's words (models without usage_metadata)."""
    input_tokens = _number(usage.get("prompt_tokens"))
    output_tokens = _number(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details") or {}
    return CallUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=_number(usage.get("total_tokens")) or input_tokens + output_tokens,
        cache_read_tokens=_number(details.get("cached_tokens")),
    )


def usage_of(response: LLMResult) -> CallUsage | None:
    """What the provider reported for one call, or None when it reported nothing."""
    for generation in chain.from_iterable(response.generations):
        usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
        if usage:
            return _from_usage_metadata(usage)
    token_usage = (response.llm_output or {}).get("token_usage")
    if isinstance(token_usage, Mapping) and token_usage:
        return _from_token_usage(token_usage)
    return None


class TokenLedger:
    def __init__(self) -> None:
        self._seen: set[UUID] = set()
        self._counts: dict[tuple[str, str], TokenCount] = {}

    def add(self, call_id: UUID, model: str, source: str, usage: CallUsage | None) -> bool:
        """Count one finished call; False (and nothing counted) when already counted."""
        if call_id in self._seen:
            return False
        self._seen.add(call_id)
        count = self._counts.setdefault((model, source), TokenCount(model, source))
        count.llm_calls += 1
        if usage is not None:
            count.input_tokens += usage.input_tokens
            count.output_tokens += usage.output_tokens
            count.total_tokens += usage.total_tokens
            count.cache_read_tokens += usage.cache_read_tokens
        return True

    def counts(self, prices: Mapping[str, Price]) -> list[TokenCount]:
        """The run's counts, priced by the table in force now."""
        return [replace(count).priced(prices) for count in self._counts.values()]


def token_count_proto(count: TokenCount) -> admission_pb2.TokenCount:
    return admission_pb2.TokenCount(
        model=count.model,
        source=count.source,
        input_tokens=count.input_tokens,
        output_tokens=count.output_tokens,
        total_tokens=count.total_tokens,
        cache_read_tokens=count.cache_read_tokens,
        llm_calls=count.llm_calls,
        cost=count.cost,
    )
