"""`quotas.gateway.requests_per_second`: each API key's requests, counted in this
gateway process alone (in memory; N gateways let a key through N times as fast).

A token bucket per principal (one per API key), as full as one second's requests
at most. A request finding it empty is answered 429 with the wait until the next
token, before any service is called.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from waybill.gateway.errors import QuotaRefused

# Past this many keys tracked, the buckets full again (idle keys) are forgotten:
# a full bucket is what a key never seen gets anyway.
MAX_TRACKED_KEYS = 10_000


@dataclass
class Bucket:
    tokens: float
    at: float  # when `tokens` was counted (monotonic seconds)


class RequestRate:
    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.capacity = max(per_second, 1.0)  # at least one request always passes
        self.clock = clock
        self.buckets: dict[str, Bucket] = {}

    def wait_for(self, key: str) -> float | None:
        """Take one request of `key`'s bucket: None when it passes, else the
        seconds until it would."""
        now = self.clock()
        bucket = self.buckets.get(key)
        if bucket is None:
            self._forget_idle(now)
            bucket = self.buckets[key] = Bucket(self.capacity, now)
        bucket.tokens = min(self.capacity, bucket.tokens + (now - bucket.at) * self.per_second)
        bucket.at = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return None
        return (1.0 - bucket.tokens) / self.per_second

    def check(self, key: str) -> None:
        """Raise the 429 for `key` when its bucket is empty."""
        wait = self.wait_for(key)
        if wait is None:
            return
        refusal = {
            "limit": "requests_per_second",
            "value": self.per_second,
            "use": self.per_second,
            "retry_after": wait,
        }
        raise QuotaRefused(
            f"Quota exceeded for {key}: requests_per_second is {self.per_second:g} "
            "(counted by this gateway process).",
            refusal,
        )

    def _forget_idle(self, now: float) -> None:
        if len(self.buckets) < MAX_TRACKED_KEYS:
            return
        refill = self.capacity / self.per_second
        self.buckets = {
            key: bucket for key, bucket in self.buckets.items() if now - bucket.at < refill
        }
